//go:build !historyd_testhook

package server

import "google.golang.org/grpc"

// registerTestHooks does nothing: the test-hook service exists only in binaries built with the
// historyd_testhook build tag (testhook_on.go).
func registerTestHooks(*grpc.Server) {}
