package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// format writes a figure with the precision its unit needs.
func format(v float64, unit string) string {
	switch unit {
	case "msg/s":
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// printTable writes the rows as an aligned text table.
func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tmedian\tmin-max\tunit\ttarget\tmet\tfrom")
	for _, r := range rows {
		median, lo, hi := r.figures()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, median, span(lo, hi, "-"), r.Unit, dash(r.Target), dash(r.Met()), r.Detail)
	}
	_ = tw.Flush()
}

// markdown writes the results file: the machine and settings, the table, the notes, and the top
// of any profile taken for a missed target.
func markdown(w io.Writer, m machine, cfg config, rows []row) {
	fmt.Fprintf(w, "# historyd benchmark results\n\n")
	fmt.Fprintf(w, "Written by `make bench` (cmd/historybench); docs/performance.md says how to read it.\n\n")
	fmt.Fprintf(w, "- date: %s\n", m.Date)
	fmt.Fprintf(w, "- machine: %d cores (GOMAXPROCS %d), %s, %s; load average %s at the start, %s at the end\n",
		m.Cores, m.GOMAXPROCS, m.CPU, m.OS, m.LoadStart, m.LoadEnd)
	fmt.Fprintf(w, "- historyd %s, built with %s; the load generator runs on the same machine\n", m.Version, m.GoVersion)
	fmt.Fprintf(w, "- %d runs of each figure (median, min-max), %v of load per throughput run; server flags: defaults", cfg.Runs, cfg.Duration)
	if len(cfg.ServerFlags) > 0 {
		fmt.Fprintf(w, " and `%s` with the memory engine", strings.Join(cfg.ServerFlags, " "))
	}
	fmt.Fprintf(w, "; memory engine `--store memory`, sqlite engine `--store sqlite --data-dir <a temporary directory> --sqlite-cache %d --sqlite-readers %d` and `--sync normal` unless the row says full",
		cfg.SQLiteCache, cfg.SQLiteReaders)
	fmt.Fprintf(w, "; PostgreSQL engine `--store postgres --postgres-url <-postgres-url>&search_path=<a schema the bench makes and drops>` with the row's `--postgres-max-conns`")
	fmt.Fprintf(w, "\n- total time %s\n\n", m.Elapsed)
	fmt.Fprintln(w, "| measurement | median | min – max | unit | target | met | from (medians) |")
	fmt.Fprintln(w, "|---|---:|---:|---|---|---|---|")
	for _, r := range rows {
		median, lo, hi := r.figures()
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Name, median, span(lo, hi, " – "),
			r.Unit, dash(r.Target), dash(r.Met()), r.Detail)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(w, "- %s: %s.\n", r.Name, r.Note)
		}
	}
	for _, r := range rows {
		if r.Profile == nil {
			continue
		}
		fmt.Fprintf(w, "\n## Target missed: %s\n\nThe top of a %s profile of the server taken during a further run (saved as `%s`, not committed):\n\n```\n%s\n```\n",
			r.Name, r.Profile.Kind, r.Profile.File, r.Profile.Top)
		if r.Profile.Cum != "" {
			fmt.Fprintf(w, "\nThe same, by cumulative share:\n\n```\n%s\n```\n", r.Profile.Cum)
		}
	}
}

// figures are the median, minimum and maximum of a row; for a skipped row, the reason it has none.
func (r row) figures() (median, lo, hi string) {
	if r.Skipped != "" {
		return r.Skipped, "", ""
	}
	s := r.Summary()
	return format(s.Median, r.Unit), format(s.Min, r.Unit), format(s.Max, r.Unit)
}

// span writes "lo-hi" with sep, or a dash when there are no figures.
func span(lo, hi, sep string) string {
	if lo == "" {
		return "—"
	}
	return lo + sep + hi
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
