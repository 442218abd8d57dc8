#!/usr/bin/env bash
# Builds the client-go v1.20.2 peer programs (core/ and sync/ next to this script) against the
# client-go in Debian's `kubernetes` source package (v1.20.2, the tree the test cluster's
# kube-apiserver is built from; client-go is in its staging/ and vendor/), with Debian's Go.
#
# usage: build.sh CACHE_DIR
#
# Prints the directory holding the `core` and `sync` executables on its last stdout line.
# Cached in CACHE_DIR/client-go-v1.20.2: the unpacked source tree (fetched once with
# `apt-get source kubernetes`), Go's build cache, and the executables under a name derived from
# the harness sources and the Go version (a changed harness is rebuilt in seconds). A flock
# keeps two callers from building at once.
#
# Run by `cargo xtask bench core --compare` and `cargo xtask bench e2e --compare`, after
# testcluster has installed golang-go, dpkg-dev and Debian's reflect2 and added the deb-src
# entry (its own build script does that). Safe to run by hand.
set -euo pipefail

CACHE_DIR=${1:?usage: build.sh CACHE_DIR}
HARNESS=$(cd "$(dirname "$0")" && pwd)
BASE="$CACHE_DIR/client-go-v1.20.2"
JOBS=${INFORMER_BUILD_JOBS:-2}

log() { echo "[client-go peer build] $*" >&2; }

mkdir -p "$BASE"
exec 9>"$BASE/build.lock"
if ! flock -n 9; then
    log "another caller holds $BASE/build.lock; waiting for it"
    flock 9
fi

# 1. The source tree, once.
if [[ ! -f $BASE/tree-complete ]]; then
    rm -rf "$BASE/src"
    mkdir -p "$BASE/src"
    cd "$BASE/src"
    log "apt-get source kubernetes (about 34 MB)"
    apt-get source -qq kubernetes >&2
    TREE=$(find "$BASE/src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
    case "$TREE" in
    *1.20.2*) ;;
    *)
        log "unexpected source tree: '$TREE' (want kubernetes 1.20.2)"
        exit 1
        ;;
    esac
    if [[ ! -d $TREE/staging/src/k8s.io/client-go/tools/cache ]]; then
        log "no client-go in $TREE/staging"
        exit 1
    fi
    # As for kube-apiserver: the vendored reflect2 v1.0.1 crashes under Go >= 1.18 (json-iterator
    # uses it, and client-go decodes with json-iterator); Debian's v1.0.2 replaces it.
    log "replacing vendored github.com/modern-go/reflect2 with Debian's copy"
    rm -rf "$TREE/vendor/github.com/modern-go/reflect2"
    cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$TREE/vendor/github.com/modern-go/reflect2"
    rm -f "$TREE/vendor/github.com/modern-go/reflect2/go.mod" "$TREE/vendor/github.com/modern-go/reflect2/go.sum"
    printf '%s' "$TREE" >"$BASE/tree-complete"
fi
TREE=$(cat "$BASE/tree-complete")

# 2. The executables, per harness source and Go version.
HASH=$( (
    cd "$HARNESS"
    sha256sum core/*.go sync/*.go podwatch/*.go
    go version
) | sha256sum | cut -c1-16)
OUT="$BASE/bin-$HASH"
if [[ -x $OUT/core && -x $OUT/sync && -x $OUT/podwatch ]]; then
    log "cached: $OUT"
    echo "$OUT"
    exit 0
fi

# Like Debian's debian/rules: GOPATH mode, a GOPATH whose src/k8s.io/kubernetes is the tree, so
# the harness (a package inside it) imports the tree's vendor/ (client-go = staging/src/...).
export GOPATH="$BASE/gopath"
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$TREE" "$GOPATH/src/k8s.io/kubernetes"
export GO111MODULE=off
export GOCACHE="$BASE/gocache"
export CGO_ENABLED=0
export GOFLAGS="-p=$JOBS"
PKG_DIR="$TREE/informer-rs-peers"
rm -rf "$PKG_DIR"
mkdir -p "$PKG_DIR"
cp -r "$HARNESS/core" "$HARNESS/sync" "$HARNESS/podwatch" "$PKG_DIR/"
STAGE="$BASE/stage-tmp"
rm -rf "$STAGE"
mkdir -p "$STAGE"
for prog in core sync podwatch; do
    log "go build $prog (client-go v1.20.2, $(go version | cut -d' ' -f3); the first build compiles client-go: a few minutes)"
    nice -n 10 go build -o "$STAGE/$prog" "k8s.io/kubernetes/informer-rs-peers/$prog"
done
rm -rf "$BASE"/bin-*
mv -T "$STAGE" "$OUT"
log "built $OUT"
echo "$OUT"
