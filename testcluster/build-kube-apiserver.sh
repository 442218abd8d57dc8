#!/usr/bin/env bash
# Installs what a local kube-apiserver v1.20.2 + etcd need from Debian bookworm and, unless the
# cache already holds it, builds kube-apiserver from Debian's `kubernetes` source package.
#
# usage: build-kube-apiserver.sh CACHE_DIR [--deps-only]
#
# Result: CACHE_DIR/kube-apiserver-v1.20.2/kube-apiserver plus a marker file `complete` in the same
# directory. The directory is built under a temporary name and renamed into place, so an
# interrupted build is never taken for a good one. A flock on CACHE_DIR/build.lock keeps two
# concurrent callers from building twice (the second waits, then finds the result).
#
# Run by testcluster::ensure_built(); safe to run by hand.
set -euo pipefail

CACHE_DIR=${1:?usage: build-kube-apiserver.sh CACHE_DIR [--deps-only]}
MODE=${2:-}
VERSION_DIR_NAME=kube-apiserver-v1.20.2
FINAL="$CACHE_DIR/$VERSION_DIR_NAME"
MARKER_TEXT="kube-apiserver v1.20.2 (Debian kubernetes source, reflect2 v1.0.2 vendored)"
# Build parallelism: the machine is shared, keep it modest unless told otherwise.
JOBS=${INFORMER_BUILD_JOBS:-2}

log() { echo "[testcluster build] $*" >&2; }

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    fi
fi
as_root() { "${SUDO[@]}" "$@"; }

export DEBIAN_FRONTEND=noninteractive

APT_UPDATED=0
apt_update_once() {
    if [[ $APT_UPDATED -eq 0 ]]; then
        log "apt-get update"
        as_root apt-get update -qq -o DPkg::Lock::Timeout=300 >&2
        APT_UPDATED=1
    fi
}

# Installs the given Debian packages, only those not installed yet.
install_missing() {
    local missing=()
    local p
    for p in "$@"; do
        if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != *"install ok installed"* ]]; then
            missing+=("$p")
        fi
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        apt_update_once
        log "apt-get install ${missing[*]}"
        as_root apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" >&2
    fi
}

# The URI of the configured Debian archive that serves bookworm (deb822 or one-line format).
debian_archive_uri() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        awk 'BEGIN { RS = ""; FS = "\n" }
            {
                types = ""; uris = ""; suites = ""; comps = ""
                for (i = 1; i <= NF; i++) {
                    if ($i ~ /^Types:/) types = $i
                    if ($i ~ /^URIs:/) uris = $i
                    if ($i ~ /^Suites:/) suites = $i
                    if ($i ~ /^Components:/) comps = $i
                }
                if (types ~ /[ \t]deb([ \t]|$)/ && suites ~ /[ \t]bookworm([ \t]|$)/ && comps ~ /[ \t]main([ \t]|$)/) {
                    sub(/^URIs:[ \t]*/, "", uris); split(uris, a, /[ \t]+/); print a[1]; exit
                }
            }' "$f"
    done | head -n1 | grep . && return 0
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' |
        awk '$1 == "deb" && $3 == "bookworm" { for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }' |
        head -n1 | grep .
}

# Makes `apt-get source kubernetes` possible: adds a deb-src entry for bookworm main if needed.
ensure_deb_src() {
    if apt-cache showsrc kubernetes 2>/dev/null | grep '^Version: .*1\.20\.2' >/dev/null; then
        return 0
    fi
    local uri
    uri=$(debian_archive_uri) || {
        log "no Debian bookworm 'main' archive is configured in /etc/apt; cannot add deb-src"
        exit 1
    }
    log "adding deb-src entry for bookworm main ($uri)"
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    {
        echo "Types: deb-src"
        echo "URIs: $uri"
        echo "Suites: bookworm"
        echo "Components: main"
        if [[ -f $keyring ]]; then echo "Signed-By: $keyring"; fi
    } | as_root tee /etc/apt/sources.list.d/informer-rs-bookworm-src.sources >/dev/null
    APT_UPDATED=0
    apt_update_once
    if ! apt-cache showsrc kubernetes 2>/dev/null | grep '^Version: .*1\.20\.2' >/dev/null; then
        log "apt-cache showsrc kubernetes finds no 1.20.2 source even after adding deb-src"
        exit 1
    fi
}

# One caller at a time, from the package installs on (apt/dpkg locks would clash too).
mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/build.lock"
if ! flock -n 9; then
    log "another caller holds $CACHE_DIR/build.lock; waiting for it"
    flock 9
fi

# Runtime needs (always): etcd and etcdctl, curl for readiness checks, openssl for keys.
install_missing etcd-server etcd-client curl openssl ca-certificates
if [[ $MODE == --deps-only ]]; then
    exit 0
fi

if [[ -f $FINAL/complete && -x $FINAL/kube-apiserver ]] && [[ $(cat "$FINAL/complete") == "$MARKER_TEXT" ]]; then
    log "already built: $FINAL/kube-apiserver"
    exit 0
fi

start=$(date +%s)
install_missing golang-go rsync make golang-github-modern-go-reflect2-dev dpkg-dev
ensure_deb_src

WORK="$CACHE_DIR/build-tmp"
rm -rf "$WORK" "$CACHE_DIR/stage-tmp"
mkdir -p "$WORK/src"
cd "$WORK/src"
log "apt-get source kubernetes (about 34 MB)"
apt-get source -qq kubernetes >&2
TREE=$(find "$WORK/src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
if [[ -z $TREE || ! -f $TREE/cmd/kube-apiserver/apiserver.go ]]; then
    log "apt-get source kubernetes did not produce a source tree in $WORK/src"
    exit 1
fi
case "$TREE" in
*1.20.2*) ;;
*)
    log "unexpected source version: $TREE (want 1.20.2)"
    exit 1
    ;;
esac

# Go >= 1.18 breaks the vendored reflect2 v1.0.1 (SIGSEGV in reflect.mapiterinit at run time):
# use Debian's v1.0.2 instead.
log "replacing vendored github.com/modern-go/reflect2 with Debian's copy"
rm -rf "$TREE/vendor/github.com/modern-go/reflect2"
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$TREE/vendor/github.com/modern-go/reflect2"
rm -f "$TREE/vendor/github.com/modern-go/reflect2/go.mod" "$TREE/vendor/github.com/modern-go/reflect2/go.sum"

# Build like Debian's debian/rules: a GOPATH whose src/k8s.io/kubernetes links to the tree.
export GOPATH="$WORK/gopath"
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$TREE" "$GOPATH/src/k8s.io/kubernetes"
export GOCACHE="$WORK/gocache"
export CGO_ENABLED=0
export GOFLAGS="-p=$JOBS"
export GOMAXPROCS=$JOBS
export KUBE_GIT_VERSION=v1.20.2
export KUBE_GIT_TREE_STATE=clean
export KUBE_GIT_MAJOR=1
export KUBE_GIT_MINOR=20
log "make WHAT=cmd/kube-apiserver (several minutes; GOFLAGS=$GOFLAGS)"
cd "$GOPATH/src/k8s.io/kubernetes"
nice -n 10 make WHAT=cmd/kube-apiserver >&2
BIN="$TREE/_output/bin/kube-apiserver"
if [[ ! -x $BIN ]]; then
    BIN=$(find "$TREE/_output" -type f -name kube-apiserver -perm -u+x | head -n1)
fi
if [[ -z $BIN || ! -x $BIN ]]; then
    log "make finished but no kube-apiserver binary under $TREE/_output"
    exit 1
fi

STAGE="$CACHE_DIR/stage-tmp"
mkdir -p "$STAGE"
cp "$BIN" "$STAGE/kube-apiserver.part"
mv "$STAGE/kube-apiserver.part" "$STAGE/kube-apiserver"
printf '%s' "$MARKER_TEXT" >"$STAGE/complete"
sync "$STAGE/kube-apiserver" "$STAGE/complete" 2>/dev/null || true
rm -rf "$FINAL"
mv -T "$STAGE" "$FINAL"
chmod -R u+w "$WORK" 2>/dev/null || true
rm -rf "$WORK"
log "built $FINAL/kube-apiserver in $(($(date +%s) - start)) s"
