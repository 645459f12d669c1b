package server

import "github.com/prometheus/client_golang/prometheus"

// SetBuildInfo registers historyd_build_info{version,commit,go_version} = 1, the usual Prometheus
// idiom for which build a process runs (issue 19). Call it once, before serving.
func (m *Metrics) SetBuildInfo(version, commit, goVersion string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Name:      "build_info",
		Help:      "Always 1; the labels say which build of historyd this process runs.",
	}, []string{"version", "commit", "go_version"})
	g.WithLabelValues(version, commit, goVersion).Set(1)
	m.reg.MustRegister(g) // once per Metrics: a second call is a programming error
}
