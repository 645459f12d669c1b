// Package deploy holds historyd's deployment files — the container image (Dockerfile), the
// Kubernetes manifests (kubernetes/) and the systemd unit (systemd/) — and, in its test, the
// checks that keep them true: the image builds with the Makefile's own build command, and the
// manifests and the unit parse and carry the fields the README promises. No Docker engine or
// cluster runs where the tests do, so the test reads the files with the standard library only.
//
// The package has no Go code of its own and imports nothing of historyd's; nothing imports it.
package deploy
