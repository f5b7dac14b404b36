package main

import (
	"fmt"
	"image/color"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotRestarts draws time-to-restart against gang size, one line per system and one for
// the floor, for one scenario of one session. Systems that gave up on the gang have no point.
func (r *session) plotRestarts(scenario, path string) (bool, error) {
	if len(r.systems(scenario)) == 0 {
		return false, nil // the floor alone is no comparison
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: time to every worker Running again (%s)", scenario, qpsLabel(r.qps))
	p.X.Label.Text = "workers"
	p.Y.Label.Text = "seconds"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	d := func(s sample) time.Duration { return s.d }
	lines := 0
	for i, sys := range append([]string{scenarioFloor}, r.systems(scenario)...) {
		sc := scenario
		if sys == scenarioFloor {
			sc = scenarioFloor
		}
		var xys plotter.XYs
		for _, n := range r.sizes() {
			ss := r.pick(sys, sc, n)
			if len(ss) == 0 || ss[0].gaveUp {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(n), Y: median(ss, d).Seconds()})
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return false, err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		if sys == scenarioFloor {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			sys = "floor (create + schedule from scratch)"
		}
		p.Add(l, pts)
		p.Legend.Add(sys, l, pts)
		lines++
	}
	if lines == 0 {
		return false, nil
	}
	return true, p.Save(16*vg.Centimeter, 11*vg.Centimeter, path)
}

// plotPhases draws faultline's restart as a stacked bar per gang size, one segment per
// phase of its trace.
func (r *session) plotPhases(scenario, path string) (bool, error) {
	var sizes []int
	for _, n := range r.sizes() {
		if len(phaseDurations(r.pick(sysFaultline, scenario, n), restartPhases[0])) > 0 {
			sizes = append(sizes, n)
		}
	}
	if len(sizes) == 0 {
		return false, nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("faultline, %s: where the restart's time goes (%s)", scenario, qpsLabel(r.qps))
	p.Y.Label.Text = "seconds"
	p.Legend.Top, p.Legend.Left = true, true
	names := make([]string, len(sizes))
	for i, n := range sizes {
		names[i] = strconv.Itoa(n) + " workers"
	}
	p.NominalX(names...)
	var below *plotter.BarChart
	for i, phase := range restartPhases {
		vals := make(plotter.Values, len(sizes))
		for j, n := range sizes {
			vals[j] = summarize(phaseDurations(r.pick(sysFaultline, scenario, n), phase)).median.Seconds()
		}
		bar, err := plotter.NewBarChart(vals, vg.Points(28))
		if err != nil {
			return false, err
		}
		bar.Color = phaseColors[i%len(phaseColors)]
		bar.LineStyle.Color = color.Gray{Y: 80}
		if below != nil {
			bar.StackOn(below)
		}
		below = bar
		p.Add(bar)
		p.Legend.Add(phase, bar)
	}
	return true, p.Save(16*vg.Centimeter, 11*vg.Centimeter, path)
}

// phaseColors tell the eight restart phases apart (gonum's default palette has seven).
var phaseColors = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x17, 0xbe, 0xcf, 0xff},
}
