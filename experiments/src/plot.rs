//! PNG plots in the style of the papers' figures: goodput over time, one panel per scenario,
//! one line per protocol, vertical markers for events (outages, joins, migrations).
//!
//! Text is rendered with DejaVu Sans bundled in `assets/` (plotters' `ab_glyph` backend), so
//! plotting needs no system fonts.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// One line of a plot.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    /// (time in seconds, value).
    pub points: Vec<(f64, f64)>,
}

/// A vertical line at an event.
#[derive(Debug, Clone)]
pub struct Marker {
    pub label: String,
    pub t: f64,
}

/// One chart of a figure.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
    /// Legend in the upper right corner instead of the lower right one.
    pub legend_top: bool,
    /// What the x values are (time by default).
    pub x_axis: XAxis,
    /// Horizontal dashed lines `(series index, y)`, in that series' colour (e.g. a rate limit).
    pub dashed: Vec<(usize, f64)>,
}

/// The x axis of a panel.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum XAxis {
    /// Seconds since the start.
    #[default]
    Time,
    /// A quantity on a linear scale, with this axis label.
    Linear(String),
    /// A quantity from 1 up on a base-2 logarithmic scale (e.g. a number of streams), with this
    /// axis label; ticks show the quantity.
    Log2(String),
}

impl XAxis {
    fn position(&self, x: f64) -> f64 {
        match self {
            XAxis::Log2(_) => x.max(1.0).log2(),
            _ => x,
        }
    }

    fn label(&self) -> &str {
        match self {
            XAxis::Time => "time (s)",
            XAxis::Linear(l) | XAxis::Log2(l) => l,
        }
    }
}

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The only error is a malformed font, which include_bytes! of a known file rules out.
        let _ = register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// Colour of the i-th series (the same protocol keeps the same colour across panels when
/// experiments list their series in the same order).
pub fn colour(label: &str, i: usize) -> RGBColor {
    let l = label.to_ascii_lowercase();
    if l.starts_with("mptcp") {
        RGBColor(214, 39, 40)
    } else if l.starts_with("tls") {
        RGBColor(44, 160, 44)
    } else if l.contains("1500") {
        RGBColor(148, 103, 189)
    } else if l.starts_with("tcpls") && i == 0 {
        RGBColor(31, 119, 180)
    } else {
        [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(140, 86, 75), RGBColor(23, 190, 207)][i % 4]
    }
}

/// `x` with a binary prefix when it is large (1K = 1024), for base-2 axes.
fn binary_quantity(x: f64) -> String {
    if x >= f64::from(1u32 << 20) {
        format!("{:.0}M", x / f64::from(1u32 << 20))
    } else if x >= 1024.0 {
        format!("{:.0}K", x / 1024.0)
    } else {
        format!("{x:.0}")
    }
}

/// Renders `panels` stacked vertically under a common title into a PNG.
pub fn render(path: &Path, title: &str, panels: &[Panel]) -> Result<(), String> {
    register();
    let height = 60 + 330 * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (1100, height)).into_drawing_area();
    let e = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root.titled(title, (FAMILY, 26)).map_err(|x| e(&x))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    // Time axes are shared by all panels (events line up); other axes fit their own points.
    let time_max = panels
        .iter()
        .filter(|p| p.x_axis == XAxis::Time)
        .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|(t, _)| *t)))
        .fold(1.0f64, f64::max);
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let axis = &panel.x_axis;
        let (x_min, x_max) = if *axis == XAxis::Time {
            (0.0, time_max)
        } else {
            let xs = || panel.series.iter().flat_map(|s| s.points.iter().map(|(x, _)| axis.position(*x)));
            let (lo, hi) = (xs().fold(f64::INFINITY, f64::min), xs().fold(f64::NEG_INFINITY, f64::max));
            let pad = if hi > lo { (hi - lo) * 0.05 } else { 1.0 };
            if lo.is_finite() {
                (lo - pad, hi + pad)
            } else {
                (0.0, 1.0)
            }
        };
        // Headroom above the highest point: for the marker labels, and for a legend on top.
        let headroom = if panel.legend_top { 1.5 } else { 1.15 };
        let y_max = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|(_, v)| *v))
            .chain(panel.dashed.iter().map(|(_, v)| *v))
            .fold(1.0f64, f64::max)
            * headroom;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, (FAMILY, 19))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(x_min..x_max, 0.0..y_max)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc(axis.label())
            // Short runs get ticks every half second: whole numbers would repeat ("0 1 1 2").
            .x_label_formatter(&|v| match axis {
                XAxis::Log2(_) => binary_quantity(2f64.powf(*v)),
                _ if x_max - x_min >= 10.0 => format!("{v:.0}"),
                _ => format!("{v:.1}"),
            })
            .y_label_formatter(&|v| if y_max >= 20.0 { format!("{v:.0}") } else { format!("{v:.1}") })
            .y_desc(panel.y_label.as_str())
            .label_style((FAMILY, 15))
            .axis_desc_style((FAMILY, 16))
            .max_light_lines(1) // sparse grid: easier to read, and the PNG compresses to a fraction
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(|x| e(&x))?;
        for m in &panel.markers {
            let style = ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(1);
            chart.draw_series(LineSeries::new([(m.t, 0.0), (m.t, y_max)], style)).map_err(|x| e(&x))?;
            chart
                .draw_series(std::iter::once(Text::new(
                    m.label.clone(),
                    (m.t, y_max * 0.97),
                    (FAMILY, 14).into_font().color(&BLACK.mix(0.8)),
                )))
                .map_err(|x| e(&x))?;
        }
        for (i, y) in &panel.dashed {
            let c = panel.series.get(*i).map_or(BLACK, |s| colour(&s.label, *i));
            let style = ShapeStyle::from(&c).stroke_width(2);
            chart.draw_series(DashedLineSeries::new([(x_min, *y), (x_max, *y)], 10, 6, style)).map_err(|x| e(&x))?;
        }
        for (i, s) in panel.series.iter().enumerate() {
            let c = colour(&s.label, i);
            let points = s.points.iter().map(|(x, y)| (axis.position(*x), *y));
            // Few points of a measured quantity (not a time series): mark each one, so that a
            // single point is visible too.
            if *axis != XAxis::Time && s.points.len() <= 50 {
                let dots = points.clone().map(|p| Circle::new(p, 4, ShapeStyle::from(&c).filled()));
                chart.draw_series(dots).map_err(|x| e(&x))?;
            }
            chart
                .draw_series(LineSeries::new(points, ShapeStyle::from(&c).stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 22, y)], ShapeStyle::from(&c).stroke_width(3)));
        }
        chart
            .configure_series_labels()
            .position(if panel.legend_top { SeriesLabelPosition::UpperRight } else { SeriesLabelPosition::LowerRight })
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font((FAMILY, 15))
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
