package bench

import (
	_ "embed"
	"math"
	"strings"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
)

// The report's charts are drawn by Apache ECharts through go-echarts. go-echarts' own page
// template loads echarts.min.js from a CDN; the report renders only each chart's snippet
// (its container and its setOption script) and inlines the vendored library once, so the
// page opens offline.

// echartsJS is Apache ECharts (Apache-2.0; see assets/LICENSE, assets/NOTICE, assets/README.md).
//
//go:embed assets/echarts.min.js
var echartsJS string

// echartsVersion is the version of assets/echarts.min.js.
const echartsVersion = "5.6.0"

// series is one line of a chart.
type series struct {
	name  string
	color string
	ys    []float64
	right bool // on the chart's second y axis
}

// chartHTML holds one chart: its container and the script that draws into it.
type chartHTML struct {
	element, script string
}

// echartsScript is the library as an inline script, to put before the first chart's script.
func echartsScript() string {
	return "<script>/* Apache ECharts " + echartsVersion + ", Apache License 2.0 */\n" + echartsJS + "\n</script>\n"
}

// chartResizeScript resizes every chart with the window.
const chartResizeScript = `<script>window.addEventListener("resize",function(){document.querySelectorAll("[_echarts_instance_]").forEach(function(d){var c=echarts.getInstanceByDom(d);if(c){c.resize();}});});</script>
`

// lineChart draws the series over xs (seconds from the start). id must be a JavaScript
// identifier: go-echarts names the chart's variables after it. yName labels the left axis,
// y2Name the right one that series with right set are drawn against ("" for none).
func lineChart(id string, xs []float64, yName, y2Name string, ss []series) chartHTML {
	line := charts.NewLine()
	colors := make(opts.Colors, len(ss))
	for i, s := range ss {
		colors[i] = s.color
	}
	splitLine := &opts.SplitLine{Show: opts.Bool(true), LineStyle: &opts.LineStyle{Color: "#eee"}}
	line.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{ChartID: id, Width: "100%", Height: "340px", Renderer: "svg"}),
		charts.WithAnimation(false),
		charts.WithColorsOpts(colors),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Top: "0"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithGridOpts(opts.Grid{Left: "10", Right: "20", Top: "40", Bottom: "10", ContainLabel: opts.Bool(true)}),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Min: 0, Max: "dataMax", SplitLine: splitLine, AxisLabel: &opts.AxisLabel{Formatter: "{value} s"}}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: yName, SplitLine: splitLine}),
	)
	if y2Name != "" {
		line.ExtendYAxis(opts.YAxis{Type: "value", Name: y2Name, Position: "right", SplitLine: &opts.SplitLine{Show: opts.Bool(false)}})
	}
	for _, s := range ss {
		data := make([]opts.LineData, 0, len(xs))
		for i, x := range xs {
			var y any = "-" // a gap in the line
			if i < len(s.ys) && !math.IsNaN(s.ys[i]) && !math.IsInf(s.ys[i], 0) {
				y = math.Round(s.ys[i]*1000) / 1000
			}
			data = append(data, opts.LineData{Value: []any{math.Round(x*1000) / 1000, y}})
		}
		lc := opts.LineChart{ShowSymbol: opts.Bool(len(xs) <= 40), SymbolSize: 4}
		if s.right && y2Name != "" {
			lc.YAxisIndex = 1
		}
		line.AddSeries(s.name, data, charts.WithLineChartOpts(lc), charts.WithLineStyleOpts(opts.LineStyle{Width: 1.6}))
	}
	sn := line.RenderSnippet()
	return chartHTML{element: strings.TrimSpace(sn.Element), script: strings.TrimSpace(sn.Script)}
}
