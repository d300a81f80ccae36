//! SVG charts (plotters, SVG backend): grouped bar charts per category (the papers' per-workload
//! figures) and line charts over time.

use crate::error::SimError;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// Colours of the series, in order (colour-blind-safe Okabe–Ito palette).
const PALETTE: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
];

/// Draws the chart's legend (the series' labels, boxed) at `position` and writes the file.
fn finish<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    c: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    c.configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// A grouped bar chart: one group per category, one bar per series.
#[derive(Clone, Debug)]
pub struct Bars<'a> {
    /// Chart title.
    pub title: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// Category labels along the x axis.
    pub categories: Vec<String>,
    /// `(name, one value per category)`.
    pub series: Vec<(&'a str, Vec<f64>)>,
    /// A horizontal reference line (e.g. 1.0), if any.
    pub reference: Option<f64>,
}

/// A line chart of several series over one x axis.
#[derive(Clone, Debug)]
pub struct Lines<'a> {
    /// Chart title.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// X values.
    pub x: Vec<f64>,
    /// `(name, one value per x)`.
    pub series: Vec<(&'a str, Vec<f64>)>,
}

fn plot_err(path: &Path) -> impl Fn(String) -> SimError + '_ {
    move |problem| SimError::Output {
        what: path.display().to_string(),
        problem,
    }
}

/// Draws `chart` into the SVG file `path`.
pub fn bars(path: &Path, chart: &Bars<'_>) -> Result<(), SimError> {
    let err = plot_err(path);
    let n = chart.categories.len();
    let k = chart.series.len().max(1);
    let top = chart
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .chain(chart.reference)
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        * 1.12;
    let top = if top > 0.0 { top } else { 1.0 };
    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut c = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n as f64, 0.0..top)
        .map_err(|e| err(e.to_string()))?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(chart.y_label)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    // Category labels under the middle of each group (plotters' numeric labels fall elsewhere).
    let style =
        TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, label) in chart.categories.iter().enumerate() {
        let (px, py) = c.backend_coord(&(i as f64 + 0.5, 0.0));
        root.draw(&Text::new(label.clone(), (px, py + 6), style.clone()))
            .map_err(|e| err(e.to_string()))?;
    }
    let width = 0.8 / k as f64;
    for (s, (name, values)) in chart.series.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        c.draw_series(values.iter().enumerate().map(|(i, &v)| {
            let x0 = i as f64 + 0.1 + s as f64 * width;
            Rectangle::new([(x0, 0.0), (x0 + width * 0.92, v.max(0.0))], color.filled())
        }))
        .map_err(|e| err(e.to_string()))?
        .label(*name)
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    if let Some(r) = chart.reference {
        c.draw_series(LineSeries::new(
            [(0.0, r), (n as f64, r)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| err(e.to_string()))?;
    }
    finish(&root, &mut c, SeriesLabelPosition::UpperLeft).map_err(err)?;
    Ok(())
}

/// Draws `chart` into the SVG file `path`.
pub fn lines(path: &Path, chart: &Lines<'_>) -> Result<(), SimError> {
    let err = plot_err(path);
    let x_max = chart.x.iter().copied().fold(0.0_f64, f64::max).max(1.0);
    let y_max = chart
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.1;
    let root = SVGBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut c = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| err(e.to_string()))?;
    c.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (s, (name, values)) in chart.series.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        c.draw_series(LineSeries::new(
            chart.x.iter().copied().zip(values.iter().copied()),
            color.stroke_width(1),
        ))
        .map_err(|e| err(e.to_string()))?
        .label(*name)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
    }
    finish(&root, &mut c, SeriesLabelPosition::UpperRight).map_err(err)?;
    Ok(())
}

/// A line chart where each series has its own points, marked (a series may stop early: UMR
/// where it is infeasible), on an axis that starts at the smallest x.
pub fn xy(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), SimError> {
    let err = |e: String| SimError::Output {
        what: path.display().to_string(),
        problem: e,
    };
    let pts = || series.iter().flat_map(|(_, v)| v.iter().copied());
    let x_min = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = pts().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let y_max = pts().map(|p| p.1).fold(0.0_f64, f64::max) * 1.1;
    let (x_min, x_max) = if x_min < x_max {
        (x_min, x_max)
    } else {
        (0.0, 1.0)
    };
    let y_max = if y_max > 0.0 { y_max } else { 1.0 };
    // Ratios near 1 get a zoomed axis; makespans start at zero.
    let y_low = pts().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let y_min = if y_low > 0.5 * y_max {
        y_low * 0.95
    } else {
        0.0
    };
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_min..x_max, y_min..y_max)
        .map_err(|e| err(e.to_string()))?;
    c.configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (s, (name, values)) in series.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        c.draw_series(LineSeries::new(
            values.iter().copied(),
            color.stroke_width(2),
        ))
        .map_err(|e| err(e.to_string()))?
        .label(name.as_str())
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
        c.draw_series(values.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(e.to_string()))?;
    }
    let corner = legend_corner(series, (x_min, x_max), (y_min, y_max));
    finish(&root, &mut c, corner).map_err(err)?;
    Ok(())
}

/// The corner of an [`xy`] chart whose legend would cover the least of the lines: upper left
/// unless the lines pass there. The legend's box is estimated from its labels (about 7 px per
/// character beside a 40 px sample, 18 px per row, on a plot area of about 810 × 380 px), and
/// each line is sampled along its segments.
fn legend_corner(
    series: &[(String, Vec<(f64, f64)>)],
    (x_min, x_max): (f64, f64),
    (y_min, y_max): (f64, f64),
) -> SeriesLabelPosition {
    let chars = series
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    let width = ((chars as f64 * 7.0 + 40.0) / 810.0).min(1.0);
    let height = ((series.len() as f64 * 18.0 + 12.0) / 380.0).min(1.0);
    // A point as fractions of the plot area, (0, 0) at the lower left.
    let at = |(x, y): (f64, f64)| ((x - x_min) / (x_max - x_min), (y - y_min) / (y_max - y_min));
    let samples: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, v)| {
            v.windows(2).flat_map(|w| {
                let (a, b) = (at(w[0]), at(w[1]));
                (0..=20).map(move |k| {
                    let t = f64::from(k) / 20.0;
                    (a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1))
                })
            })
        })
        .chain(series.iter().flat_map(|(_, v)| v.iter().map(|&p| at(p))))
        .collect();
    let corners = [
        (SeriesLabelPosition::UpperLeft, 0.0, 1.0 - height),
        (SeriesLabelPosition::UpperRight, 1.0 - width, 1.0 - height),
        (SeriesLabelPosition::LowerRight, 1.0 - width, 0.0),
        (SeriesLabelPosition::LowerLeft, 0.0, 0.0),
    ];
    let covered = |&(_, x0, y0): &(SeriesLabelPosition, f64, f64)| {
        samples
            .iter()
            .filter(|&&(x, y)| x >= x0 && x <= x0 + width && y >= y0 && y <= y0 + height)
            .count()
    };
    // The first corner with the fewest samples under it (min_by_key keeps the first of equals).
    corners
        .iter()
        .min_by_key(|c| covered(c))
        .map_or(SeriesLabelPosition::UpperLeft, |c| c.0.clone())
}

/// Trailing moving mean of `values` over `window` samples (shorter at the start).
pub fn moving_mean(values: &[f64], window: usize) -> Vec<f64> {
    let window = window.max(1);
    let mut sum = 0.0;
    let mut out = Vec::with_capacity(values.len());
    for (i, &v) in values.iter().enumerate() {
        sum += v;
        if i >= window {
            sum -= values[i - window];
        }
        out.push(sum / (i + 1).min(window) as f64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corner(lines: &[Vec<(f64, f64)>]) -> SeriesLabelPosition {
        let series: Vec<(String, Vec<(f64, f64)>)> = lines
            .iter()
            .enumerate()
            .map(|(k, v)| (format!("series {k}"), v.clone()))
            .collect();
        legend_corner(&series, (0.0, 10.0), (0.0, 10.0))
    }

    fn name(p: SeriesLabelPosition) -> &'static str {
        match p {
            SeriesLabelPosition::UpperLeft => "upper left",
            SeriesLabelPosition::UpperRight => "upper right",
            SeriesLabelPosition::LowerRight => "lower right",
            SeriesLabelPosition::LowerLeft => "lower left",
            _ => "elsewhere",
        }
    }

    #[test]
    fn the_legend_goes_where_the_lines_are_not() {
        // Falling from the upper left: the upper right is free.
        assert_eq!(
            name(corner(&[vec![(0.0, 10.0), (10.0, 1.0)]])),
            "upper right"
        );
        // Rising to the upper right: the upper left stays free and is preferred.
        assert_eq!(
            name(corner(&[vec![(0.0, 1.0), (10.0, 10.0)]])),
            "upper left"
        );
        // Lines high across the whole width (the pcddb figure): below them.
        assert_eq!(
            name(corner(&[
                vec![(0.0, 9.5), (10.0, 9.8)],
                vec![(0.0, 5.0), (10.0, 9.0)]
            ])),
            "lower right"
        );
    }
}
