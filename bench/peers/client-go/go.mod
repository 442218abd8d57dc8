// The client-go peer of `cargo xtask bench core --compare` and `bench e2e --compare`.
// xtask builds it against the client-go v1.20.2 inside Debian's `kubernetes` source tree (see
// build.sh: GOPATH mode, that tree's vendor/, no network); with network access,
// `go mod tidy && go build ./...` here builds the same programs against the published modules.
module informer-rs/bench/peers/client-go

go 1.19

require (
	k8s.io/api v0.20.2
	k8s.io/apimachinery v0.20.2
	k8s.io/client-go v0.20.2
)
