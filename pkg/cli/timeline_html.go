package cli

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// Geometry of the HTML chart, in SVG user units.
const (
	svgLabel  = 96
	svgChart  = 720
	svgRow    = 30
	svgBarH   = 18
	svgTop    = 34
	svgMargin = 16
)

type svgTick struct {
	X     string
	Label string
}

type svgBar struct {
	Y, TextY, BarY       string
	Label                string
	StartX, StartW       string
	RunX, RunW           string
	HasRun, HasStart     bool
	EndX, EndY           string
	EndGlyph, EndClass   string
	Tooltip              string
	Outcome, Note, Times string
	Excluded             string
}

type htmlTimeline struct {
	Title       string
	Width       int
	Height      int
	ChartX      int
	ChartRight  int
	AxisY       int
	GridBottom  int
	Ticks       []svgTick
	Bars        []svgBar
	Events      []tlEvent
	Offset      func(time.Duration) string
	Origin      string
	LegendY     int
	GeneratedBy string
	// Goodput is the run's goodput ledger as of now (describe's line), "" without one.
	Goodput string
}

// TimelineHTML writes a standalone HTML page (inline SVG and CSS, no external assets) with
// the same chart as Timeline.
func TimelineHTML(w io.Writer, run *v1alpha1.TrainingRun, events []corev1.Event, now time.Time) error {
	t := buildTimeline(run, events, now)
	x := func(at time.Time) float64 {
		f := float64(at.Sub(t.Origin)) / float64(t.total())
		return svgLabel + min(max(f, 0), 1)*svgChart
	}
	num := func(f float64) string { return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".") }
	h := htmlTimeline{
		Title:       t.title(),
		Width:       svgLabel + svgChart + svgMargin*2,
		ChartX:      svgLabel,
		ChartRight:  svgLabel + svgChart,
		AxisY:       svgTop - 8,
		Offset:      offset,
		Origin:      stamp(t.Origin),
		GeneratedBy: "launcher timeline --html",
	}
	for _, d := range t.ticks() {
		h.Ticks = append(h.Ticks, svgTick{X: num(x(t.Origin.Add(d))), Label: tick(d)})
	}
	for i, b := range t.Bars {
		y := svgTop + i*svgRow
		sb := svgBar{
			Y:     fmt.Sprint(y),
			BarY:  fmt.Sprint(y + (svgRow-svgBarH)/2),
			TextY: fmt.Sprint(y + svgRow/2 + 4),
			Label: fmt.Sprintf("attempt %d", b.Attempt),
			Note:  b.Note, Outcome: b.Outcome,
			Excluded: strings.Join(b.Excluded, ", "),
		}
		if b.Checkpoint != "" {
			sb.Note += "; checkpoint " + b.Checkpoint
		}
		if sb.Outcome == "" {
			sb.Outcome = "Running"
		}
		start, end := x(b.Start), x(b.End)
		run := end
		if !b.Running.IsZero() {
			run = x(b.Running)
		}
		if run > start {
			sb.HasStart = true
			sb.StartX, sb.StartW = num(start), num(max(run-start, 1))
		}
		if !b.Running.IsZero() {
			sb.HasRun = true
			sb.RunX, sb.RunW = num(run), num(max(end-run, 1))
		}
		sb.EndX, sb.EndY = num(end+2), fmt.Sprint(y+svgRow/2+5)
		sb.EndGlyph = string(endGlyph(b.Outcome))
		switch b.Outcome {
		case policy.OutcomeRestarted, policy.OutcomeFailed:
			sb.EndClass = "failed"
		case policy.OutcomeSucceeded:
			sb.EndClass = "succeeded"
		default:
			sb.EndClass = "other"
		}
		sb.Times = fmt.Sprintf("%s → %s", offset(b.Start.Sub(t.Origin)), offset(b.End.Sub(t.Origin)))
		if !b.Running.IsZero() {
			sb.Times += ", all workers Running after " + runningAfter(b)
		}
		sb.Tooltip = fmt.Sprintf("attempt %d: %s (%s) %s", b.Attempt, sb.Outcome, sb.Times, b.Note)
		h.Bars = append(h.Bars, sb)
	}
	rows := max(len(t.Bars), 1)
	h.GridBottom = svgTop + rows*svgRow
	h.LegendY = h.GridBottom + 22
	h.Height = h.LegendY + 14
	h.Events = t.Events
	h.Goodput = goodputLine(run, now)
	return timelinePage.Execute(w, h)
}

var timelinePage = template.Must(template.New("timeline").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1d2430; }
h1 { font-size: 18px; margin: 0 0 12px; }
svg text { font: 12px system-ui, sans-serif; fill: #1d2430; }
svg .tick { fill: #5b6472; }
svg .grid { stroke: #e3e6ea; }
svg .starting { fill: #f2c14e; }
svg .running { fill: #3b9a57; }
svg .failed { fill: #c62828; font-weight: bold; font-size: 15px; }
svg .succeeded { fill: #2e7d32; font-weight: bold; font-size: 15px; }
svg .other { fill: #5b6472; font-weight: bold; font-size: 15px; }
table { border-collapse: collapse; margin-top: 16px; }
th, td { text-align: left; padding: 3px 12px 3px 0; vertical-align: top; }
th { border-bottom: 1px solid #c8cdd3; }
td.when, td:first-child, th { white-space: nowrap; }
td.when { font-variant-numeric: tabular-nums; }
footer { margin-top: 20px; color: #5b6472; font-size: 12px; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Title}}">
{{- range .Ticks}}
<line class="grid" x1="{{.X}}" y1="{{$.AxisY}}" x2="{{.X}}" y2="{{$.GridBottom}}"/>
<text class="tick" x="{{.X}}" y="{{$.AxisY}}" dy="-4" text-anchor="middle">{{.Label}}</text>
{{- end}}
{{- range .Bars}}
<g>
<title>{{.Tooltip}}</title>
<text x="0" y="{{.TextY}}">{{.Label}}</text>
{{- if .HasStart}}
<rect class="starting" x="{{.StartX}}" y="{{.BarY}}" width="{{.StartW}}" height="18" rx="2"/>
{{- end}}
{{- if .HasRun}}
<rect class="running" x="{{.RunX}}" y="{{.BarY}}" width="{{.RunW}}" height="18" rx="2"/>
{{- end}}
<text class="{{.EndClass}}" x="{{.EndX}}" y="{{.EndY}}">{{.EndGlyph}}</text>
</g>
{{- end}}
<g transform="translate({{.ChartX}},{{.LegendY}})">
<rect class="starting" x="0" y="-10" width="12" height="12"/><text x="16" y="0">starting</text>
<rect class="running" x="90" y="-10" width="12" height="12"/><text x="106" y="0">all workers Running</text>
<text class="failed" x="250" y="1">✗</text><text x="264" y="0">failed</text>
<text class="succeeded" x="320" y="1">✓</text><text x="334" y="0">succeeded</text>
<text class="other" x="410" y="1">‖</text><text x="420" y="0">suspended</text>
<text class="other" x="500" y="1">▸</text><text x="512" y="0">in progress</text>
</g>
</svg>
{{- if .Goodput}}
<p>Goodput: {{.Goodput}}</p>
{{- end}}
<table>
<tr><th>attempt</th><th>when (from {{.Origin}})</th><th>outcome</th><th>why</th><th>kept off</th></tr>
{{- range .Bars}}
<tr><td>{{.Label}}</td><td class="when">{{.Times}}</td><td>{{.Outcome}}</td><td>{{.Note}}</td><td>{{.Excluded}}</td></tr>
{{- end}}
</table>
{{- if .Events}}
<table>
<tr><th>when</th><th>reason</th><th>event</th></tr>
{{- range .Events}}
<tr><td class="when">{{call $.Offset .At}}</td><td>{{.Reason}}</td><td>{{.Note}}</td></tr>
{{- end}}
</table>
{{- end}}
<footer>Generated by {{.GeneratedBy}}.</footer>
</body>
</html>
`))
