package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// googleAttribution is the credit the licence of Google's cluster-usage
// trace (CC-BY 4.0) requires wherever its data or figures derived from it
// appear; the default of replay's --attribution.
const googleAttribution = "Contains data from the Google cluster-usage trace `clusterdata-2011-2` " +
	"(John Wilkes, Charles Reiss; Google), https://github.com/google/cluster-data, licensed CC-BY 4.0. " +
	"Modified: filtered to SUBMIT events in a 72-hour window; hashed identifiers truncated to 8 characters."

// dur formats trace seconds for people: "850 ms", "42 s", "7.5 min", "3.2 h".
func dur(s float64) string {
	switch {
	case s < 1:
		return strconv.FormatFloat(s*1000, 'f', 0, 64) + " ms"
	case s < 120:
		return strconv.FormatFloat(s, 'f', 0, 64) + " s"
	case s < 2*3600:
		return strconv.FormatFloat(s/60, 'f', 1, 64) + " min"
	}
	return strconv.FormatFloat(s/3600, 'f', 1, 64) + " h"
}

// modeName is how reports name a mode.
func modeName(m string) string {
	if m == "drr" {
		return "DRR (key = user)"
	}
	return "FIFO (one key)"
}

func (r *ReplayResult) writeTable(w io.Writer) error {
	fmt.Fprintf(w, "%s: %s jobs of %d users over %.1f h, at %g×; consumers %d × %s per job = %s jobs/h; noisy user %s, flood %.1f h – %.1f h\n\n",
		r.Trace, group(int64(r.Jobs)), r.Users, r.SpanHours, r.Speedup, r.Consumers, dur(r.ServiceSeconds), group(int64(r.Capacity)),
		r.Noisy, r.FloodFromHours, r.FloodToHours)
	if err := r.summary(w, false); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := r.users(w, 20, false); err != nil {
		return err
	}
	if r.ReportMarkdown != "" {
		fmt.Fprintf(w, "\nreport: %s, plot: %s\n", r.ReportMarkdown, r.ReportPlot)
	}
	return nil
}

// summary writes one row per mode, as aligned text or as Markdown.
func (r *ReplayResult) summary(w io.Writer, md bool) error {
	header := []string{"MODE", "NOISY SHARE IN FLOOD", "OTHERS P50 / P99 BEFORE", "OTHERS P50 / P99 DURING", "JUDGED", "WITHIN 2×", "WORST (USER)"}
	var rows [][]string
	for _, m := range r.Modes {
		rows = append(rows, []string{
			modeName(m.Mode), pct(m.NoisyFloodShare),
			dur(m.Others.PreP50) + " / " + dur(m.Others.PreP99),
			dur(m.Others.FloodP50) + " / " + dur(m.Others.FloodP99),
			strconv.Itoa(m.Judged), strconv.Itoa(m.Within),
			fmt.Sprintf("%.2f× (%s)", m.WorstRatio, m.WorstUser),
		})
	}
	if md {
		return mdTable(w, header, rows)
	}
	return table(w, header, rows)
}

// users writes the per-user table of the first n users by jobs (all if
// n ≤ 0), each mode side by side.
func (r *ReplayResult) users(w io.Writer, n int, md bool) error {
	if len(r.Modes) == 0 {
		return nil
	}
	header := []string{"USER", "JOBS", "BEFORE", "DURING"}
	for _, m := range r.Modes {
		p := m.Mode + " "
		header = append(header, p+"SHARE IN FLOOD", p+"P50", p+"P99", p+"P99 BEFORE", p+"P99 DURING", p+"RATIO")
	}
	index := make([]map[string]ReplayUser, len(r.Modes))
	for i, m := range r.Modes {
		index[i] = make(map[string]ReplayUser, len(m.Users))
		for _, u := range m.Users {
			index[i][u.User] = u
		}
	}
	users := r.Modes[0].Users
	if n > 0 && n < len(users) {
		users = users[:n]
	}
	var rows [][]string
	for _, u := range append(users, r.Modes[0].Others) {
		row := []string{u.User, group(int64(u.Jobs)), group(int64(u.PreJobs)), group(int64(u.FloodJobs))}
		if u.User == r.Noisy {
			row[0] += " (noisy)"
		}
		for i, m := range r.Modes {
			mu, ok := index[i][u.User]
			if u.User == r.Modes[0].Others.User {
				mu, ok = m.Others, true
			}
			if !ok {
				row = append(row, "", "", "", "", "", "")
				continue
			}
			ratio := "—"
			if mu.Judged {
				ratio = fmt.Sprintf("%.2f×", mu.Ratio)
				if !mu.WithinTwoX {
					ratio += " ✗"
				}
			}
			row = append(row, pct(mu.FloodShare), dur(mu.P50), dur(mu.P99), dur(mu.PreP99), dur(mu.FloodP99), ratio)
		}
		rows = append(rows, row)
	}
	if md {
		return mdTable(w, header, rows)
	}
	return table(w, header, rows)
}

// mdTable writes a GitHub Markdown table, the first column left-aligned
// and the others right-aligned (they hold figures).
func mdTable(w io.Writer, header []string, rows [][]string) error {
	return mdTableAligned(w, header, rows, 1)
}

// mdTableAligned writes a GitHub Markdown table whose columns from right
// on are right-aligned.
func mdTableAligned(w io.Writer, header []string, rows [][]string, right int) error {
	var b bytes.Buffer
	b.WriteString("|")
	for _, h := range header {
		b.WriteString(" " + h + " |")
	}
	b.WriteString("\n|")
	for i := range header {
		if i < right {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("|")
		for _, c := range r {
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeReport writes replay.md, replay-wait.svg and replay.json (r
// itself) into cfg.reportDir and records the first two's paths in r.
func writeReport(cfg *replayConfig, r *ReplayResult) error {
	if err := os.MkdirAll(cfg.reportDir, 0o755); err != nil {
		return fmt.Errorf("bench: replay: report: %w", err)
	}
	svgPath := filepath.Join(cfg.reportDir, "replay-wait.svg")
	if err := plotWaits(r, svgPath); err != nil {
		return fmt.Errorf("bench: replay: plot: %w", err)
	}
	mdPath := filepath.Join(cfg.reportDir, "replay.md")
	r.ReportMarkdown, r.ReportPlot = mdPath, svgPath
	var b bytes.Buffer
	r.markdown(&b, "replay-wait.svg")
	if err := os.WriteFile(mdPath, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench: replay: report: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.reportDir, "replay.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: replay: report: %w", err)
	}
	return nil
}

// markdown writes the report, with the plot at plotRef.
func (r *ReplayResult) markdown(w io.Writer, plotRef string) {
	fmt.Fprintf(w, "# Trace replay: DRR against FIFO\n\n")
	if r.Attribution != "" {
		fmt.Fprintf(w, "%s\n\n", r.Attribution)
	}
	fmt.Fprintf(w, "`%s`: %s jobs of %d users over %.1f hours of trace time, replayed at %g× (%.1f minutes of wall-clock time for the submissions).\n\n",
		r.Trace, group(int64(r.Jobs)), r.Users, r.SpanHours, r.Speedup, r.SpanHours*60/r.Speedup)
	fmt.Fprintf(w, "## Parameters\n\n")
	rows := [][]string{
		{"fairness key", "`drr`: the job's user; `fifo`: one key for every job"},
		{"consumers per queue", fmt.Sprintf("%d, one job at a time each (prefetch 1), %s of trace time per job, then an ack (sent in the background)", r.Consumers, dur(r.ServiceSeconds))},
		{"capacity", fmt.Sprintf("%s jobs per trace hour per queue", group(int64(r.Capacity)))},
	}
	if r.Providers > 0 {
		rows = append(rows, []string{"throttle key", fmt.Sprintf("provider = FNV-1a(logical_job_name) mod %d; each a token bucket of %s jobs per trace hour, burst %g, per queue", r.Providers, group(int64(r.ProviderRate)), r.ProviderBurst)})
	} else {
		rows = append(rows, []string{"throttle key", "none"})
	}
	rows = append(rows,
		[]string{"payload", fmt.Sprintf("%d bytes (DRR cost: equal for every job)", r.PayloadSize)},
		[]string{"noisy user", fmt.Sprintf("`%s` (most jobs); the flood is from its first submission to its last, %.1f h – %.1f h", r.Noisy, r.FloodFromHours, r.FloodToHours)},
		[]string{"wait", "from a job's scheduled submission to its delivery, in trace time"},
		[]string{"2× criterion", fmt.Sprintf("a user with at least %d jobs before and %d during the flood passes if its p99 wait during the flood is at most 2× its p99 before (waits under one service time, %s, count as %s)", r.MinJobs, r.MinJobs, dur(r.ServiceSeconds), dur(r.ServiceSeconds))},
	)
	mdTableAligned(w, []string{"parameter", "value"}, rows, 2)
	fmt.Fprintf(w, "\n## Summary\n\n")
	r.summary(w, true)
	fmt.Fprintf(w, "\n## Wait over trace time\n\n")
	fmt.Fprintf(w, "The wait of the jobs submitted in each %s of trace time: p99 of the noisy user's, p99 and p50 of everyone else's; dotted lines mark the flood.\n\n", dur(r.BinSeconds))
	fmt.Fprintf(w, "![Wait over trace time, the noisy user against everyone else, FIFO and DRR](%s)\n\n", plotRef)
	fmt.Fprintf(w, "## Per user\n\nUsers by jobs; ratio is p99 during the flood over p99 before (— when not judged; ✗ above 2×).\n\n")
	r.users(w, 0, true)
}

// plotWaits draws the wait over trace time as an SVG file: one panel per
// mode, each with the p99 wait of the noisy user's jobs and of everyone
// else's, and everyone else's p50, per bin of submission time, on a
// shared log scale; dotted lines mark the flood.
func plotWaits(r *ReplayResult, path string) error {
	const floorMin = 1.0 / 60 // waits under a second are drawn at a second
	top := floorMin
	for _, m := range r.Modes {
		for _, b := range m.Bins {
			top = max(top, b.NoisyP99/60, b.OthersP99/60)
		}
	}
	red := color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	blue := color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	panels := make([][]*plot.Plot, len(r.Modes))
	for i, m := range r.Modes {
		p := plot.New()
		p.Title.Text = modeName(m.Mode)
		p.X.Label.Text = "trace time (hours since the first submission)"
		p.Y.Label.Text = "wait (minutes)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = floorMin, top*30 // headroom for the legend
		p.X.Min, p.X.Max = 0, r.SpanHours
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		series := []struct {
			label string
			color color.Color
			width vg.Length
			dash  []vg.Length
			y     func(ReplayBin) (float64, bool)
		}{
			{"everyone else, p99", blue, 1.4, nil, func(b ReplayBin) (float64, bool) { return b.OthersP99, b.OthersJobs > 0 }},
			{"everyone else, p50", blue, 0.8, []vg.Length{vg.Points(4), vg.Points(2)}, func(b ReplayBin) (float64, bool) { return b.OthersP50, b.OthersJobs > 0 }},
			{"noisy user " + r.Noisy + ", p99", red, 1.4, nil, func(b ReplayBin) (float64, bool) { return b.NoisyP99, b.NoisyJobs > 0 }},
		}
		for _, s := range series {
			var first *plotter.Line
			for _, seg := range segments(m.Bins, r.BinSeconds/3600, s.y, floorMin) {
				l, err := plotter.NewLine(seg)
				if err != nil {
					return err
				}
				l.LineStyle.Color, l.LineStyle.Width, l.LineStyle.Dashes = s.color, vg.Points(float64(s.width)), s.dash
				p.Add(l)
				if first == nil {
					first = l
				}
			}
			if first != nil {
				p.Legend.Add(s.label, first)
			}
		}
		for _, x := range []float64{r.FloodFromHours, r.FloodToHours} {
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: floorMin}, {X: x, Y: top * 30}})
			if err != nil {
				return err
			}
			l.LineStyle.Color = color.Gray{Y: 0x70}
			l.LineStyle.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
			p.Add(l)
		}
		panels[i] = []*plot.Plot{p}
	}
	img := vgsvg.New(10*vg.Inch, vg.Length(len(panels))*3.6*vg.Inch)
	dc := draw.New(img)
	credit := wrap(strings.ReplaceAll(r.Attribution, "`", ""), 150)
	pad := vg.Points(6) + vg.Length(len(credit))*vg.Points(10) // room for the credit

	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: pad,
		PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(18)}
	canvases := plot.Align(panels, tiles, dc)
	for i := range panels {
		panels[i][0].Draw(canvases[i][0])
	}
	sty := draw.TextStyle{Color: color.Gray{Y: 0x50}, Font: font.From(plot.DefaultFont, vg.Points(7)), Handler: plot.DefaultTextHandler}
	for i, line := range credit {
		dc.FillText(sty, vg.Point{X: vg.Points(6), Y: vg.Length(len(credit)-i)*vg.Points(10) - vg.Points(4)}, line)
	}
	var b bytes.Buffer
	if _, err := img.WriteTo(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// segments returns the points of one series, in minutes, split where
// bins have no jobs so that a line does not bridge a gap. width is a
// bin's width in hours; values below floor are drawn at floor.
func segments(bins []ReplayBin, width float64, y func(ReplayBin) (float64, bool), floor float64) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for _, b := range bins {
		v, ok := y(b)
		if !ok {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: b.FromHours + width/2, Y: max(v/60, floor)})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// wrap breaks s into lines of at most width bytes at spaces (a longer
// word gets a line of its own); "" gives no lines.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
