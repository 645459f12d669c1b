package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dockerInstruction is one instruction of a Dockerfile, continuation lines joined.
type dockerInstruction struct {
	cmd, args string
}

func parseDockerfile(t *testing.T, src string) []dockerInstruction {
	t.Helper()
	var out []dockerInstruction
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstruction{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	return out
}

// makeVar returns the value of a simple `NAME = value` or `NAME ?= value` Makefile variable.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*\??=\s*(.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile defines no %s", name)
	}
	return strings.TrimSpace(m[1])
}

// makeRecipe returns the recipe lines of a Makefile target.
func makeRecipe(t *testing.T, makefile, target string) []string {
	t.Helper()
	var recipe []string
	in := false
	for _, line := range strings.Split(makefile, "\n") {
		switch {
		case strings.HasPrefix(line, target+":"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			recipe = append(recipe, strings.TrimSpace(line))
		case in:
			return recipe
		}
	}
	if !in {
		t.Fatalf("Makefile has no %s target", target)
	}
	return recipe
}

// TestDockerfileBuildsWithTheMakefile: the image's build stage runs `make release`, which is `make
// build` (the command the e2e tests build historyd with) with CGO_ENABLED=0 and the release
// toolchain; the stage starts from go.mod's Go; the final stage is distroless (or scratch), runs
// as a numeric non-root user, and checks its health with `historyd healthcheck` in exec form (the
// image has no shell). Issue 7: "keep the Dockerfile to the same make build the tests exercise, so
// it cannot drift".
func TestDockerfileBuildsWithTheMakefile(t *testing.T) {
	makefile := readFile(t, "../Makefile")
	ins := parseDockerfile(t, readFile(t, "Dockerfile"))

	var stages [][]dockerInstruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("%s before the first FROM", in.cmd)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	if len(stages) != 2 {
		t.Fatalf("%d stages, want a build stage and a final one", len(stages))
	}
	build, final := stages[0], stages[1]

	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(readFile(t, "../go.mod"))
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	if from := build[0].args; !strings.HasPrefix(from, "golang:"+goLine[1]+"-") || !strings.HasSuffix(from, " AS build") {
		t.Errorf("build stage FROM %q, want golang:%s-... AS build", from, goLine[1])
	}
	var runs []string
	var workdir string
	for _, in := range build {
		switch in.cmd {
		case "RUN":
			runs = append(runs, in.args)
		case "WORKDIR":
			workdir = in.args
		}
	}
	if last := runs[len(runs)-1]; last != "make release" {
		t.Errorf("the build stage's last RUN is %q, want `make release`", last)
	}
	for _, r := range runs {
		if strings.Contains(r, "go build") {
			t.Errorf("the build stage runs %q: build through the Makefile only", r)
		}
	}

	// make release is make build with the static, release-toolchain environment.
	toolchain := makeVar(t, makefile, "RELEASE_TOOLCHAIN")
	if !regexp.MustCompile(`^go1\.\d+\.\d+$`).MatchString(toolchain) {
		t.Errorf("RELEASE_TOOLCHAIN = %q, want a goX.Y.Z toolchain", toolchain)
	}
	release := makeRecipe(t, makefile, "release")
	if len(release) != 1 || release[0] != "CGO_ENABLED=0 GOTOOLCHAIN=$(RELEASE_TOOLCHAIN) $(MAKE) build" {
		t.Errorf("release recipe = %q, want `CGO_ENABLED=0 GOTOOLCHAIN=$(RELEASE_TOOLCHAIN) $(MAKE) build`", release)
	}
	if vuln := strings.Join(makeRecipe(t, makefile, "vuln"), "\n"); !strings.Contains(vuln, "GOTOOLCHAIN=$(RELEASE_TOOLCHAIN)") {
		t.Errorf("vuln recipe %q does not scan with the release toolchain", vuln)
	}
	if build := strings.Join(makeRecipe(t, makefile, "build"), "\n"); !strings.Contains(build, "-o $(BIN) ./cmd/historyd") {
		t.Errorf("build recipe %q does not build ./cmd/historyd into $(BIN)", build)
	}
	// The e2e tests build with the same target.
	if e2e := readFile(t, "../test/e2e/main_test.go"); !strings.Contains(e2e, `{"make", "build", "BIN=" + historydBin`) {
		t.Error("test/e2e no longer builds historyd with `make build`")
	}

	bin := makeVar(t, makefile, "BIN")
	wantCopy := "--from=build " + strings.TrimSuffix(workdir, "/") + "/" + bin + " /historyd"
	var user, healthcheck, entrypoint string
	var copies, volumes []string
	env := map[string]string{}
	copied := false
	for _, in := range final {
		switch in.cmd {
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		case "VOLUME":
			var vs []string
			if err := json.Unmarshal([]byte(in.args), &vs); err != nil {
				vs = strings.Fields(in.args)
			}
			volumes = append(volumes, vs...)
		case "COPY":
			copies = append(copies, in.args)
			copied = copied || in.args == wantCopy
		case "USER":
			user = in.args
		case "HEALTHCHECK":
			healthcheck = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		}
	}
	if from := final[0].args; !strings.HasPrefix(from, "gcr.io/distroless/static") && from != "scratch" {
		t.Errorf("final stage FROM %q, want distroless/static or scratch", from)
	}
	if !copied {
		t.Errorf("final stage does not COPY %s", wantCopy)
	}
	uid, _, _ := strings.Cut(user, ":")
	// Issue 14: the sqlite engine's data directory is a declared volume that HISTORYD_DATA_DIR
	// points at, and the image holds it owned by the user it runs as (a volume Docker creates over
	// a missing path is root's, which the non-root user could not write).
	dataDir := env["HISTORYD_DATA_DIR"]
	if dataDir == "" || !slices.Contains(volumes, dataDir) {
		t.Errorf("ENV HISTORYD_DATA_DIR = %q, VOLUME %q: want the data directory set and declared a volume", dataDir, volumes)
	}
	if !slices.ContainsFunc(copies, func(c string) bool {
		return strings.Contains(c, "--chown="+user) && strings.HasSuffix(c, " "+dataDir)
	}) {
		t.Errorf("final stage COPYs %q; want the data directory %s copied in with --chown=%s", copies, dataDir, user)
	}
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q, want a numeric non-root user (Kubernetes verifies runAsNonRoot by number)", user)
	}
	var entry []string
	if err := json.Unmarshal([]byte(entrypoint), &entry); err != nil || !slices.Equal(entry, []string{"/historyd"}) {
		t.Errorf("ENTRYPOINT %q, want [\"/historyd\"] in exec form", entrypoint)
	}
	_, cmd, ok := strings.Cut(healthcheck, "CMD ")
	var hc []string
	if !ok || json.Unmarshal([]byte(cmd), &hc) != nil || len(hc) < 2 || hc[0] != "/historyd" || hc[1] != "healthcheck" {
		t.Errorf("HEALTHCHECK %q, want CMD [\"/historyd\", \"healthcheck\", ...] in exec form", healthcheck)
	}
	src := readFile(t, "../cmd/historyd/healthcheck.go")
	for _, arg := range hc[2:] {
		if strings.HasPrefix(arg, "--") && !strings.Contains(src, `"`+strings.TrimPrefix(arg, "--")+`"`) {
			t.Errorf("HEALTHCHECK uses %s, which historyd healthcheck does not define", arg)
		}
	}
	// issue 19: the check follows HISTORYD_LISTEN, which healthcheck reads when no --addr is given;
	// a fixed --addr would check 50051 whatever port the container was told to listen on.
	if slices.Contains(hc, "--addr") || slices.ContainsFunc(hc, func(a string) bool { return strings.HasPrefix(a, "--addr=") }) {
		t.Errorf("HEALTHCHECK %q fixes --addr; leave it out so that the check follows HISTORYD_LISTEN", healthcheck)
	}
	if !strings.Contains(src, `getenv("HISTORYD_LISTEN")`) {
		t.Error("historyd healthcheck no longer reads HISTORYD_LISTEN, which the HEALTHCHECK relies on")
	}
}

// TestKubernetesManifests: the manifests parse; the Deployment runs one replica replaced with
// Recreate (the memory backend is single-replica), probes grpc.health.v1 natively, sets requests
// and limits, runs non-root with a read-only root filesystem, no capabilities and the runtime's
// seccomp profile, leaves the grace period room, and keeps the memory budget under the memory
// limit; the Service reaches the gRPC port (issue 7 "deploy/").
func TestKubernetesManifests(t *testing.T) {
	docs, err := parseYAML(readFile(t, "kubernetes/historyd.yaml"))
	if err != nil {
		t.Fatalf("parsing kubernetes/historyd.yaml: %v", err)
	}
	byKind := map[string]any{}
	for _, d := range docs {
		kind, err := path(d, "kind")
		if err != nil {
			t.Fatalf("a document without kind: %v", err)
		}
		byKind[kind.(string)] = d
	}
	dep, svc, pvc := byKind["Deployment"], byKind["Service"], byKind["PersistentVolumeClaim"]
	if dep == nil || svc == nil || pvc == nil || len(docs) != 3 {
		t.Fatalf("documents %v, want one PersistentVolumeClaim, one Deployment and one Service", slices.Collect(mapsKeys(byKind)))
	}
	get := func(doc any, steps ...any) string {
		t.Helper()
		v, err := path(doc, steps...)
		if err != nil {
			t.Errorf("%v: %v", steps, err)
			return ""
		}
		s, _ := v.(string)
		return s
	}
	pod := []any{"spec", "template", "spec"}
	ctr := append(slices.Clone(pod), "containers", 0)
	at := func(base []any, steps ...any) []any { return append(slices.Clone(base), steps...) }

	for _, c := range []struct {
		steps []any
		want  string
	}{
		{[]any{"apiVersion"}, "apps/v1"},
		{[]any{"spec", "replicas"}, "1"},
		{[]any{"spec", "strategy", "type"}, "Recreate"},
		{at(pod, "securityContext", "runAsNonRoot"), "true"},
		{at(pod, "securityContext", "seccompProfile", "type"), "RuntimeDefault"},
		{at(pod, "automountServiceAccountToken"), "false"},
		{at(ctr, "securityContext", "readOnlyRootFilesystem"), "true"},
		{at(ctr, "securityContext", "allowPrivilegeEscalation"), "false"},
		{at(ctr, "securityContext", "runAsNonRoot"), "true"},
		{at(ctr, "securityContext", "capabilities", "drop", 0), "ALL"},
		{at(ctr, "securityContext", "seccompProfile", "type"), "RuntimeDefault"},
		{at(ctr, "livenessProbe", "grpc", "port"), "50051"},
		{at(ctr, "readinessProbe", "grpc", "port"), "50051"},
	} {
		if got := get(dep, c.steps...); got != c.want {
			t.Errorf("Deployment %v = %q, want %q", c.steps, got, c.want)
		}
	}
	for _, kind := range []string{"requests", "limits"} {
		for _, res := range []string{"cpu", "memory"} {
			if get(dep, at(ctr, "resources", kind, res)...) == "" {
				t.Errorf("Deployment sets no %s %s", res, kind)
			}
		}
	}
	env := map[string]string{}
	envList, _ := path(dep, at(ctr, "env")...)
	for i := range envList.([]any) {
		env[get(dep, at(ctr, "env", i, "name")...)] = get(dep, at(ctr, "env", i, "value")...)
	}
	if env["HISTORYD_LISTEN"] != "0.0.0.0:50051" {
		t.Errorf("HISTORYD_LISTEN = %q, want 0.0.0.0:50051 (the probes' port, on every interface)", env["HISTORYD_LISTEN"])
	}
	grace, err := time.ParseDuration(env["HISTORYD_GRACE_PERIOD"])
	if err != nil {
		t.Fatalf("HISTORYD_GRACE_PERIOD: %v", err)
	}
	preStop, err := strconv.Atoi(get(dep, at(ctr, "lifecycle", "preStop", "sleep", "seconds")...))
	if err != nil || preStop <= 0 {
		t.Errorf("preStop sleep %q, want a few seconds for the endpoints to drain before SIGTERM", get(dep, at(ctr, "lifecycle", "preStop", "sleep", "seconds")...))
	}
	term, err := strconv.Atoi(get(dep, at(pod, "terminationGracePeriodSeconds")...))
	if err != nil || time.Duration(term-preStop)*time.Second <= grace {
		t.Errorf("terminationGracePeriodSeconds %d, want more than the preStop sleep %ds and the grace period %v", term, preStop, grace)
	}
	// Issue 14: the sqlite engine (the default) serves from a PersistentVolumeClaim mounted at
	// HISTORYD_DATA_DIR, the one writable path beside a read-only root filesystem.
	if s := env["HISTORYD_STORE"]; s != "" && s != "sqlite" {
		t.Errorf("HISTORYD_STORE = %q, want the durable default (unset or sqlite)", s)
	}
	dataDir := env["HISTORYD_DATA_DIR"]
	var dataVolume string
	mounts, _ := path(dep, at(ctr, "volumeMounts")...)
	for i := range mounts.([]any) {
		if get(dep, at(ctr, "volumeMounts", i, "mountPath")...) == dataDir {
			dataVolume = get(dep, at(ctr, "volumeMounts", i, "name")...)
			if ro, _ := path(dep, at(ctr, "volumeMounts", i, "readOnly")...); ro == "true" {
				t.Errorf("the data directory %s is mounted read-only", dataDir)
			}
		}
	}
	if dataDir == "" || dataVolume == "" {
		t.Errorf("HISTORYD_DATA_DIR = %q, want it set to a volume mount's path", dataDir)
	}
	claim := ""
	volumes, _ := path(dep, at(pod, "volumes")...)
	for i := range volumes.([]any) {
		if get(dep, at(pod, "volumes", i, "name")...) == dataVolume {
			claim = get(dep, at(pod, "volumes", i, "persistentVolumeClaim", "claimName")...)
		}
	}
	if claim == "" || claim != get(pvc, "metadata", "name") {
		t.Errorf("the data volume %q uses claim %q, want the manifest's PersistentVolumeClaim %q", dataVolume, claim, get(pvc, "metadata", "name"))
	}
	if get(pvc, "spec", "accessModes", 0) != "ReadWriteOnce" || get(pvc, "spec", "resources", "requests", "storage") == "" {
		t.Error("the PersistentVolumeClaim wants ReadWriteOnce access and a storage request")
	}
	// The sqlite page caches (one per reader and the writer) stay under the memory limit, so the
	// kernel does not kill the pod before the budgets refuse. The Exchange is in the database with
	// the sqlite engine (issue 17): HISTORYD_EXCHANGE_MAX_BYTES is the memory engine's byte budget
	// and takes no memory here, so the manifest sets none.
	limit := quantity(t, get(dep, at(ctr, "resources", "limits", "memory")...))
	readers, err := strconv.ParseInt(env["HISTORYD_SQLITE_READERS"], 10, 64)
	if err != nil {
		t.Fatalf("HISTORYD_SQLITE_READERS %q: %v", env["HISTORYD_SQLITE_READERS"], err)
	}
	if v, ok := env["HISTORYD_EXCHANGE_MAX_BYTES"]; ok {
		t.Errorf("HISTORYD_EXCHANGE_MAX_BYTES=%s in a sqlite manifest: the byte budget is the memory engine's only", v)
	}
	if caches := quantity(t, env["HISTORYD_SQLITE_CACHE"]) * (readers + 1); caches <= 0 || caches >= limit {
		t.Errorf("sqlite caches %d bytes, want them under the memory limit %d", caches, limit)
	}

	podLabels, _ := path(dep, "spec", "template", "metadata", "labels")
	selector, _ := path(svc, "spec", "selector")
	for k, v := range selector.(map[string]any) {
		if podLabels.(map[string]any)[k] != v {
			t.Errorf("Service selects %s=%v, which the pods do not carry", k, v)
		}
	}
	if get(svc, "spec", "ports", 0, "targetPort") != "grpc" || get(dep, at(ctr, "ports", 0, "name")...) != "grpc" ||
		get(dep, at(ctr, "ports", 0, "containerPort")...) != "50051" {
		t.Error("the Service's first port does not reach the container's grpc port 50051")
	}
}

// quantity reads a Kubernetes memory quantity or a historyd size (Mi, Gi, MiB, GiB) in bytes.
func quantity(t *testing.T, s string) int64 {
	t.Helper()
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"Gi", 1 << 30}, {"Mi", 1 << 20}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", s, err)
			}
			return v * u.mult
		}
	}
	t.Fatalf("quantity %q: unknown unit", s)
	return 0
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestSystemdUnit: the unit is hardened (a dynamic user, a read-only system, no new privileges, no
// capabilities), reloads with SIGHUP, and gives the graceful stop room (issue 7: "a hardened
// systemd unit").
func TestSystemdUnit(t *testing.T) {
	sections := map[string]map[string][]string{}
	var cur string
	for i, line := range strings.Split(readFile(t, "systemd/historyd.service"), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = strings.Trim(line, "[]")
			sections[cur] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == "" {
				t.Fatalf("line %d: %q is not key=value in a section", i+1, line)
			}
			sections[cur][k] = append(sections[cur][k], v)
		}
	}
	svc := sections["Service"]
	if svc == nil || sections["Unit"] == nil || sections["Install"] == nil {
		t.Fatalf("sections %v, want Unit, Service and Install", slices.Collect(func(yield func(string) bool) {
			for k := range sections {
				if !yield(k) {
					return
				}
			}
		}))
	}
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictSUIDSGID": "yes", "CapabilityBoundingSet": "",
		"AmbientCapabilities": "", "KillSignal": "SIGTERM", "ExecStart": "/usr/local/bin/historyd",
		"LockPersonality": "yes", "MemoryDenyWriteExecute": "yes", "SystemCallArchitectures": "native",
	} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s = %q, want exactly %q", k, got, want)
		}
	}
	if r := svc["ExecReload"]; len(r) != 1 || !strings.Contains(r[0], "kill -HUP $MAINPID") {
		t.Errorf("ExecReload = %q, want kill -HUP $MAINPID (SIGHUP reloads tokens and TLS files)", r)
	}
	stop, err := strconv.Atoi(strings.Join(svc["TimeoutStopSec"], ""))
	if err != nil || time.Duration(stop)*time.Second <= 10*time.Second {
		t.Errorf("TimeoutStopSec = %q, want more than historyd's default grace period of 10s", svc["TimeoutStopSec"])
	}
	// Issue 14: the data directory is the unit's StateDirectory (created for the dynamic user,
	// writable under ProtectSystem=strict, kept across restarts), and historyd is told so.
	if got := svc["StateDirectory"]; len(got) != 1 || got[0] != "historyd" {
		t.Errorf("[Service] StateDirectory = %q, want historyd", got)
	}
	if !slices.Contains(svc["Environment"], "HISTORYD_DATA_DIR=/var/lib/historyd") {
		t.Errorf("[Service] Environment = %q, want HISTORYD_DATA_DIR=/var/lib/historyd (the StateDirectory)", svc["Environment"])
	}
	if !slices.Contains(svc["SystemCallFilter"], "@system-service") {
		t.Errorf("SystemCallFilter = %q, want @system-service", svc["SystemCallFilter"])
	}
}

// TestSystemdUnitVerifies runs systemd's own checker on the unit (unknown keys, bad values, a
// malformed section), with ExecStart pointed at an executable that exists here: the test binary
// stands in for /usr/local/bin/historyd, since verify checks only that the file is executable.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not on PATH; TestSystemdUnit still checks the unit's keys")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := readFile(t, "systemd/historyd.service")
	if !strings.Contains(unit, "ExecStart=/usr/local/bin/historyd\n") {
		t.Fatal("ExecStart is no longer /usr/local/bin/historyd; update this test")
	}
	unit = strings.Replace(unit, "ExecStart=/usr/local/bin/historyd\n", "ExecStart="+self+"\n", 1)
	path := filepath.Join(t.TempDir(), "historyd.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
