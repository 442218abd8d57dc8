//! A real kube-apiserver + etcd on loopback for tests: not built yet.
