package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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

// modeName is how reports name a mode of r.
func (r *ReplayResult) modeName(m string) string {
	key := "user"
	if r.TraceFormat == layoutCSV {
		key = "fairness_key"
	}
	switch m {
	case "fifo":
		return "FIFO (one key)"
	case "drr", "stfq":
		return strings.ToUpper(m) + " (key = " + key + ")"
	case "tenants":
		return "STFQ (tenant, then " + key + ")"
	}
	return m
}

// modeList names r's modes for prose: "FIFO, DRR and STFQ".
func (r *ReplayResult) modeList() string {
	names := make([]string, len(r.Modes))
	for i, m := range r.Modes {
		names[i] = strings.ToUpper(m.Mode)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func (r *ReplayResult) writeTable(w io.Writer) error {
	if !r.Valid {
		for _, why := range r.InvalidReasons {
			fmt.Fprintf(w, "INVALID: %s\n", why)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%s: %s jobs of %d users over %.1f h, at %g×; consumers %d × %s per job = %s jobs/h; noisy user %s, flood %.1f h – %.1f h\n\n",
		r.Trace, group(int64(r.Jobs)), r.Users, r.SpanHours, r.Speedup, r.Consumers, dur(r.ServiceSeconds), group(int64(r.Capacity)),
		r.Noisy, r.FloodFromHours, r.FloodToHours)
	if err := r.validity(w, false); err != nil {
		return err
	}
	fmt.Fprintln(w)
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

// validity writes one row per mode: how it ran and whether it is valid,
// as aligned text or as Markdown.
func (r *ReplayResult) validity(w io.Writer, md bool) error {
	header := []string{"MODE", "POLICY", "WALL", "BACKLOG", "CONSUMERS BUSY", "JOBS/H IN BACKLOG", "ENQUEUE LATE P50 / P99 / MAX", "VALID"}
	var rows [][]string
	for _, m := range r.Modes {
		v := m.Validity
		busy, perHour := "untested", "—"
		if v.CapacityTested {
			busy, perHour = pct(v.Busy), group(int64(math.Round(v.ProcessedPerHour)))
		}
		valid := "yes"
		if !v.Valid {
			valid = "INVALID"
		}
		rows = append(rows, []string{
			m.Mode, m.Policy, wallTime(m.WallSeconds), dur(v.BacklogHours * 3600), busy, perHour,
			dur(v.LatenessP50) + " / " + dur(v.LatenessP99) + " / " + dur(v.LatenessMax), valid,
		})
	}
	if md {
		return mdTable(w, header, rows)
	}
	return table(w, header, rows)
}

// wallTime formats wall-clock seconds: "4.2 s", "42 s", "7 min 12 s".
func wallTime(s float64) string {
	if s < 9.95 {
		return strconv.FormatFloat(s, 'f', 1, 64) + " s"
	}
	d := time.Duration(math.Round(s)) * time.Second
	if d < time.Minute {
		return strconv.Itoa(int(d/time.Second)) + " s"
	}
	return fmt.Sprintf("%d min %d s", int(d/time.Minute), int(d%time.Minute/time.Second))
}

// summary writes one row per mode, as aligned text or as Markdown.
func (r *ReplayResult) summary(w io.Writer, md bool) error {
	header := []string{"MODE", "NOISY SHARE IN FLOOD", "OTHERS P50 / P99 BEFORE", "OTHERS P50 / P99 DURING", "JUDGED", "WITHIN 2×", "WORST (USER)"}
	var rows [][]string
	for _, m := range r.Modes {
		name := r.modeName(m.Mode)
		if !m.Validity.Valid {
			name += " INVALID"
		}
		worst := "—"
		if m.Judged > 0 {
			worst = fmt.Sprintf("%.2f× (%s)", m.WorstRatio, m.WorstUser)
		}
		rows = append(rows, []string{
			name, pct(m.NoisyFloodShare),
			dur(m.Others.PreP50) + " / " + dur(m.Others.PreP99),
			dur(m.Others.FloodP50) + " / " + dur(m.Others.FloodP99),
			strconv.Itoa(m.Judged), strconv.Itoa(m.Within), worst,
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
	for _, u := range append(slices.Clip(users), r.Modes[0].Others) {
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

// The report's files in its directory.
const (
	reportMarkdown = "replay.md"
	reportPlot     = "replay-wait.svg"
	reportJSON     = "replay.json"
)

// writeReport writes replay.md, replay-wait.svg and replay.json (r
// itself) into dir and records the first two's paths in r.
func writeReport(dir string, r *ReplayResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: replay: report: %w", err)
	}
	svgPath := filepath.Join(dir, reportPlot)
	if err := plotWaits(r, svgPath); err != nil {
		return fmt.Errorf("bench: replay: plot: %w", err)
	}
	mdPath := filepath.Join(dir, reportMarkdown)
	r.ReportMarkdown, r.ReportPlot = mdPath, svgPath
	var b bytes.Buffer
	r.markdown(&b, reportPlot)
	if err := os.WriteFile(mdPath, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench: replay: report: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, reportJSON), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: replay: report: %w", err)
	}
	return nil
}

// markdown writes the report, with the plot at plotRef.
func (r *ReplayResult) markdown(w io.Writer, plotRef string) {
	fmt.Fprintf(w, "# Trace replay: %s\n\n", r.modeList())
	if !r.Valid {
		fmt.Fprintf(w, "> **INVALID:** this run did not measure what it claims to; its figures describe this machine under this load, not the scheduler.\n>\n")
		for _, why := range r.InvalidReasons {
			fmt.Fprintf(w, "> - %s\n", why)
		}
		fmt.Fprintln(w)
	}
	if r.Attribution != "" {
		fmt.Fprintf(w, "%s\n\n", r.Attribution)
	}
	fmt.Fprintf(w, "`%s`: %s jobs of %d users over %.1f hours of trace time, replayed at %g× (%.1f minutes of wall-clock time for the submissions) once per mode, each mode alone, one after another (%s in all).\n\n",
		r.Trace, group(int64(r.Jobs)), r.Users, r.SpanHours, r.Speedup, r.SpanHours*60/r.Speedup, wallTime(r.WallSeconds))
	fmt.Fprintf(w, "## Parameters\n\n")
	key := "the job's user"
	if r.TraceFormat == layoutCSV {
		key = "the job's `fairness_key`, its tenant when empty"
	}
	var modes []string
	for _, m := range r.Modes {
		switch m.Mode {
		case "fifo":
			modes = append(modes, "`fifo`: one fairness key for every job, on a `drr` queue")
		case "drr":
			modes = append(modes, "`drr`: "+key+", on a `drr` queue")
		case "stfq":
			modes = append(modes, "`stfq`: "+key+", on an `stfq` queue (the broker's default latency lane)")
		case "tenants":
			modes = append(modes, "`tenants`: "+key+" under the job's tenant, on an `stfq` queue with a tenant hierarchy (a tenant's keys share its one share)")
		}
	}
	cost := fmt.Sprintf("%s of trace time per job", dur(r.ServiceSeconds))
	if r.JobCosts {
		cost = fmt.Sprintf("the trace's `cost` where it gives one, else %s; %s per job on average", dur(r.ServiceSeconds), dur(r.MeanCostSeconds))
	}
	rows := [][]string{
		{"trace layout", "`" + r.TraceFormat + "`"},
		{"modes", strings.Join(modes, "; ")},
		{"consumers per queue", fmt.Sprintf("%d, one job at a time each (prefetch 1), %s, then an ack (sent in the background)", r.Consumers, cost)},
		{"capacity", fmt.Sprintf("%s jobs per trace hour per queue", group(int64(r.Capacity)))},
		{"throttle keys", r.throttleText()},
		{"payload", fmt.Sprintf("%d bytes (DRR cost: equal for every job)", r.PayloadSize)},
		{"noisy user", fmt.Sprintf("`%s` (most jobs); the flood is from its first submission to its last, %.1f h – %.1f h", r.Noisy, r.FloodFromHours, r.FloodToHours)},
		{"wait", "from a job's scheduled submission to its delivery, in trace time"},
		{"2× criterion", fmt.Sprintf("a user with at least %d jobs before and %d during the flood passes if its p99 wait during the flood is at most 2× its p99 before (waits under one service time, %s, count as %s)", r.MinJobs, r.MinJobs, dur(r.ServiceSeconds), dur(r.ServiceSeconds))},
		{"validity", fmt.Sprintf("while the broker held enough deliverable jobs to keep every consumer busy, the consumers were busy at least %s of the time; enqueues were accepted at most %s after their scheduled time at p99", pct(r.MinBusy), dur(r.MaxLatenessSeconds))},
	}
	mdTableAligned(w, []string{"parameter", "value"}, rows, 2)
	fmt.Fprintf(w, "\n## Validity\n\n")
	fmt.Fprintf(w, "Backlog: trace time during which the broker held enough deliverable jobs (ready, not waiting for a throttle token) to keep every consumer busy; consumers busy: their share of that time spent on jobs; enqueue lateness: from a job's scheduled submission to the broker's acceptance, in trace time.\n\n")
	r.validity(w, true)
	fmt.Fprintf(w, "\n## Summary\n\n")
	r.summary(w, true)
	fmt.Fprintf(w, "\n## Wait over trace time\n\n")
	fmt.Fprintf(w, "The wait of the jobs submitted in each %s of trace time, one line per mode: p99 and p50 of everyone else's, p99 of the noisy user's; dotted lines mark the flood.\n\n", dur(r.BinSeconds))
	fmt.Fprintf(w, "![Wait over trace time, everyone else and the noisy user, %s](%s)\n\n", r.modeList(), plotRef)
	fmt.Fprintf(w, "## Per user\n\nUsers by jobs; ratio is p99 during the flood over p99 before (— when not judged; ✗ above 2×).\n\n")
	r.users(w, 0, true)
}

// throttleText describes the throttle keys of r for the parameters.
func (r *ReplayResult) throttleText() string {
	var parts []string
	if r.Providers > 0 {
		parts = append(parts, fmt.Sprintf("provider = FNV-1a(logical_job_name) mod %d, named `provider-<n>`; each a token bucket of %s jobs per trace hour, burst %g", r.Providers, group(int64(r.ProviderRate)), r.ProviderBurst))
	} else if r.ThrottleKeys > 0 {
		parts = append(parts, fmt.Sprintf("%d distinct keys from the trace's `throttle_key`", r.ThrottleKeys))
	}
	if len(r.ThrottleRates) > 0 {
		var rs []string
		for _, t := range r.ThrottleRates {
			rs = append(rs, fmt.Sprintf("`%s` %s jobs per trace hour, burst %g", t.Key, strconv.FormatFloat(t.Rate, 'f', -1, 64), t.Burst))
		}
		parts = append(parts, "given rates: "+strings.Join(rs, ", "))
	}
	if r.ThrottleKeys == 0 && r.Providers == 0 {
		return "none"
	}
	if r.Providers == 0 {
		parts = append(parts, "keys without a rate are unlimited")
	}
	return strings.Join(parts, "; ") + "; each mode's buckets its own"
}

// modeColors are the plot's colours of the modes, by name; a mode not
// named takes one of spareColors.
var (
	modeColors = map[string]color.Color{
		"fifo": color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		"drr":  color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		"stfq": color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	}
	// modeDashes tell lines apart where they overlap: stfq's, dashed,
	// lets drr's show through.
	modeDashes  = map[string][]vg.Length{"stfq": {vg.Points(5), vg.Points(3)}}
	spareColors = []color.Color{
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	}
)

// plotWaits draws the wait over trace time (see drawWaits) as an SVG
// file at path.
func plotWaits(r *ReplayResult, path string) error {
	img := vgsvg.New(waitsWidth, waitsHeight)
	if err := drawWaits(r, draw.New(img)); err != nil {
		return err
	}
	var b bytes.Buffer
	if _, err := img.WriteTo(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// The size of the wait plot: three panels of 2.8 inches.
const (
	waitsWidth  = 11 * vg.Inch
	waitsHeight = 3 * 2.8 * vg.Inch
)

// drawWaits draws the wait over trace time onto dc: three panels, the
// p99 and the p50 wait of everyone else's jobs and the p99 of the noisy
// user's, per bin of submission time, each with one line per mode on a
// shared log scale; dotted lines mark the flood. The legend stands to
// the right of the panels, outside every plot area; the attribution
// runs along the bottom.
func drawWaits(r *ReplayResult, dc draw.Canvas) error {
	const floorMin = 1.0 / 60 // waits under a second are drawn at a second
	top := floorMin
	for _, m := range r.Modes {
		for _, b := range m.Bins {
			top = max(top, b.NoisyP99/60, b.OthersP99/60)
		}
	}
	top *= 1.5
	right := r.SpanHours // the right edge: the last bin's
	for _, m := range r.Modes {
		right = max(right, float64(len(m.Bins))*r.BinSeconds/3600)
	}
	panels := []struct {
		title string
		y     func(ReplayBin) (float64, bool)
	}{
		{"everyone else: p99 wait", func(b ReplayBin) (float64, bool) { return b.OthersP99, b.OthersJobs > 0 }},
		{"everyone else: p50 wait", func(b ReplayBin) (float64, bool) { return b.OthersP50, b.OthersJobs > 0 }},
		{"noisy user " + r.Noisy + ": p99 wait", func(b ReplayBin) (float64, bool) { return b.NoisyP99, b.NoisyJobs > 0 }},
	}
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(10)
	legend.Padding = vg.Points(3)
	spare := 0
	styles := make([]draw.LineStyle, len(r.Modes))
	for i, m := range r.Modes {
		c, ok := modeColors[m.Mode]
		if !ok {
			c = spareColors[spare%len(spareColors)]
			spare++
		}
		styles[i] = draw.LineStyle{Color: c, Width: vg.Points(1.4), Dashes: modeDashes[m.Mode]}
		name := r.modeName(m.Mode)
		if !m.Validity.Valid {
			name += " INVALID"
		}
		l := &plotter.Line{LineStyle: styles[i]}
		legend.Add(name, l)
	}
	floodStyle := draw.LineStyle{Color: color.Gray{Y: 0x70}, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(1), vg.Points(2)}}
	legend.Add("flood", &plotter.Line{LineStyle: floodStyle})

	rows := make([][]*plot.Plot, len(panels))
	for pi, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		if pi == len(panels)-1 {
			p.X.Label.Text = "trace time (hours since the first submission)"
		}
		p.Y.Label.Text = "wait (minutes)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		for i, m := range r.Modes {
			for _, seg := range segments(m.Bins, r.BinSeconds/3600, pn.y, floorMin) {
				l, err := plotter.NewLine(seg)
				if err != nil {
					return err
				}
				l.LineStyle = styles[i]
				p.Add(l)
			}
		}
		for _, x := range []float64{r.FloodFromHours, r.FloodToHours} {
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: floorMin}, {X: x, Y: top}})
			if err != nil {
				return err
			}
			l.LineStyle = floodStyle
			p.Add(l)
		}
		// After the lines, which widen the axes to their data: every
		// panel spans the same bins and waits.
		p.Y.Min, p.Y.Max = floorMin, top
		p.X.Min, p.X.Max = 0, right
		rows[pi] = []*plot.Plot{p}
	}
	// The legend's column: as wide as its longest entry, at most a third
	// of the figure.
	legendWidth := min(legend.Rectangle(dc).Size().X+vg.Points(24), (dc.Max.X-dc.Min.X)/3)
	credit := wrap(strings.ReplaceAll(r.Attribution, "`", ""), 160)
	pad := vg.Points(6) + vg.Length(len(credit))*vg.Points(10) // room for the credit
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadTop: vg.Points(6), PadBottom: pad,
		PadLeft: vg.Points(6), PadRight: legendWidth, PadY: vg.Points(14)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	width := dc.Max.X - dc.Min.X
	legend.Draw(draw.Crop(dc, width-legendWidth+vg.Points(12), 0, pad, -vg.Points(24)))
	sty := draw.TextStyle{Color: color.Gray{Y: 0x50}, Font: font.From(plot.DefaultFont, vg.Points(7)), Handler: plot.DefaultTextHandler}
	for i, line := range credit {
		dc.FillText(sty, vg.Point{X: dc.Min.X + vg.Points(6), Y: dc.Min.Y + vg.Length(len(credit)-i)*vg.Points(10) - vg.Points(4)}, line)
	}
	return nil
}

// mergeResults reads the replay.json files at paths, written by earlier
// runs of the same trace with the same parameters and different modes,
// and returns one result with all their modes, in the order of paths
// and of each file's modes. It fails for a file that is not such a
// result, a mode found twice or parameters that differ.
func mergeResults(paths []string) (*ReplayResult, error) {
	var out *ReplayResult
	var firstParams map[string]json.RawMessage
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("bench: replay: merge: %w", err)
		}
		var r ReplayResult
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("bench: replay: merge: %s: %w", p, err)
		}
		if r.Workload != "replay" || len(r.Modes) == 0 {
			return nil, fmt.Errorf("bench: replay: merge: %s: not the result of a replay", p)
		}
		params, err := r.params()
		if err != nil {
			return nil, err
		}
		if out == nil {
			first := r
			first.Modes, first.WallSeconds = nil, 0
			out, firstParams = &first, params
		} else if name := differing(firstParams, params); name != "" {
			return nil, fmt.Errorf("bench: replay: merge: %s: %s is %s, in %s %s", p, name, params[name], paths[0], firstParams[name])
		}
		for _, m := range r.Modes {
			if slices.ContainsFunc(out.Modes, func(o ReplayMode) bool { return o.Mode == m.Mode }) {
				return nil, fmt.Errorf("bench: replay: merge: %s: mode %s given twice", p, m.Mode)
			}
			out.Modes = append(out.Modes, m)
			out.WallSeconds += m.WallSeconds
		}
	}
	out.Valid, out.InvalidReasons = true, nil
	for _, m := range out.Modes {
		if !m.Validity.Valid {
			out.Valid = false
			for _, why := range m.Validity.Reasons {
				out.InvalidReasons = append(out.InvalidReasons, m.Mode+": "+why)
			}
		}
	}
	out.ReportMarkdown, out.ReportPlot = "", ""
	return out, nil
}

// params returns r's fields as JSON values, by name, less those that
// describe its runs rather than the replay: what merged results share.
func (r ReplayResult) params() (map[string]json.RawMessage, error) {
	r.Modes, r.WallSeconds, r.Valid, r.InvalidReasons, r.ReportMarkdown, r.ReportPlot = nil, 0, false, nil, "", ""
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	err = json.Unmarshal(b, &m)
	return m, err
}

// differing returns the first name, in sorted order, whose value in a
// and b differs, or "".
func differing(a, b map[string]json.RawMessage) string {
	names := slices.Sorted(maps.Keys(a))
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	for _, n := range names {
		if !bytes.Equal(a[n], b[n]) {
			return n
		}
	}
	return ""
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
