//! PNG plots of `cairn fs-bench` (and of `cairn cluster-bench`, which draws its runs the
//! same way): the create rate of every target over the run, a line per target, on a
//! logarithmic rate axis (like the throughput timeline of the TableFS paper),
//! against elapsed time and against files created.
//!
//! No system font is needed: text is drawn from the 8×8 bitmap font of `font8x8`,
//! scaled, pixel by pixel; plotters draws only lines and rectangles.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::{
    BitMapBackend, Circle, Color, DrawResult, DrawingArea, DrawingAreaErrorKind, IntoDrawingArea,
    PathElement, RGBColor, Rectangle, ShapeStyle, WHITE,
};

use crate::chart::{nice, short, text, tick, Align};

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 620;
const LEFT: i32 = 110;
const RIGHT: i32 = 250;
const TOP: i32 = 76;
const BOTTOM: i32 = 80;

/// Line colours by target: lib, fuse, plain, then others.
const COLORS: [RGBColor; 8] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// One target's create rate: `(seconds since the start, files created, creates/s)` at
/// the end of each interval, and the average rate over the whole run.
pub struct Series<'a> {
    pub label: &'a str,
    pub average: f64,
    pub points: &'a [(f64, u64, f64)],
}

/// Which quantity the horizontal axis shows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    Seconds,
    Files,
}

/// Draws the create rates of `series` into the PNG `path`.
pub fn create_rate(path: &Path, heading: &str, x_axis: XAxis, series: &[Series<'_>]) -> Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let frame = RateFrame::of(x_axis, series);
    frame.draw(&root, heading).map_err(err)?;
    // A line per target, and the legend with its average.
    for (i, s) in series.iter().enumerate() {
        frame.draw_series(&root, i, s).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// A bitmap to draw on.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

const INK: RGBColor = RGBColor(40, 40, 40);

/// The frame of [`create_rate`]: its box, its horizontal axis (seconds or files, ticks
/// `x_step` apart up to `x_end`) and its logarithmic rate axis (decades `d_lo` to
/// `d_hi`).
struct RateFrame {
    x_axis: XAxis,
    x0: i32,
    x1: i32,
    y0: i32,
    y1: i32,
    x_step: f64,
    x_end: f64,
    d_lo: i32,
    d_hi: i32,
}

impl RateFrame {
    /// The frame that holds every point of `series`.
    fn of(x_axis: XAxis, series: &[Series<'_>]) -> RateFrame {
        let all = || series.iter().flat_map(|s| s.points.iter());
        let x_max = all().map(|p| x_of(x_axis, p)).fold(0.0, f64::max).max(1e-3);
        // The rate axis spans whole decades around every rate.
        let (lo, hi) = all()
            .map(|p| p.2.max(1.0))
            .fold((f64::MAX, 1.0f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
        let lo = if lo == f64::MAX { 1.0 } else { lo };
        let d_lo = lo.log10().floor() as i32;
        let d_hi = (hi.log10().ceil() as i32).max(d_lo + 1);
        let (x_step, x_end) = nice(x_max, 6.0);
        RateFrame {
            x_axis,
            x0: LEFT,
            x1: WIDTH as i32 - RIGHT,
            y0: TOP,
            y1: HEIGHT as i32 - BOTTOM,
            x_step,
            x_end,
            d_lo,
            d_hi,
        }
    }

    /// The column of `x` (seconds or files).
    fn px(&self, x: f64) -> i32 {
        self.x0 + ((x / self.x_end) * (self.x1 - self.x0) as f64).round() as i32
    }

    /// The row of rate `r`.
    fn py(&self, r: f64) -> i32 {
        let f = (r.max(1.0).log10() - self.d_lo as f64) / (self.d_hi - self.d_lo) as f64;
        self.y1 - (f * (self.y1 - self.y0) as f64).round() as i32
    }

    /// The grids, their labels, the box, the axis titles and the plot's `heading`.
    fn draw(&self, root: &Area<'_>, heading: &str) -> DrawResult<(), BitMapBackend<'_>> {
        let (x0, x1, y0, y1) = (self.x0, self.x1, self.y0, self.y1);
        let grid = RGBColor(225, 225, 225);
        let fine = RGBColor(242, 242, 242);
        // Vertical grid and labels of the horizontal axis.
        let mut x = 0.0;
        while x <= self.x_end + self.x_step * 1e-6 {
            let px = self.px(x);
            root.draw(&PathElement::new(vec![(px, y0), (px, y1)], grid))?;
            let label = match self.x_axis {
                XAxis::Seconds => tick(x, self.x_step),
                XAxis::Files => short(x),
            };
            text(root, px, y1 + 10, &label, 2, INK, Align::Center)?;
            x += self.x_step;
        }
        // Horizontal grid: each decade labelled, 2× and 5× lighter and labelled when
        // there are few decades.
        for d in self.d_lo..=self.d_hi {
            for m in [1.0, 2.0, 5.0] {
                let r = m * 10f64.powi(d);
                if d == self.d_hi && m > 1.0 {
                    break;
                }
                let major = m == 1.0;
                let py = self.py(r);
                root.draw(&PathElement::new(
                    vec![(x0, py), (x1, py)],
                    if major { grid } else { fine },
                ))?;
                if major || self.d_hi - self.d_lo <= 2 {
                    text(root, x0 - 8, py - 8, &short(r), 2, INK, Align::Right)?;
                }
            }
        }
        root.draw(&Rectangle::new([(x0, y0), (x1, y1)], INK))?;
        let x_title = match self.x_axis {
            XAxis::Seconds => "seconds",
            XAxis::Files => "files in the directory",
        };
        text(root, (x0 + x1) / 2, y1 + 40, x_title, 2, INK, Align::Center)?;
        let y_title = "creates/s (log scale)";
        text(root, 12, y0 - 26, y_title, 2, INK, Align::Left)?;
        text(root, WIDTH as i32 / 2, 14, heading, 2, INK, Align::Center)
    }

    /// Target `s`, the `i`-th: its line and its legend with its average.
    fn draw_series(
        &self,
        root: &Area<'_>,
        i: usize,
        s: &Series<'_>,
    ) -> DrawResult<(), BitMapBackend<'_>> {
        let color = match s.label {
            "lib" => COLORS[0],
            "fuse" => COLORS[1],
            "fuse-classic" | "xfs" => COLORS[3],
            "btrfs" => COLORS[4],
            "plain" => COLORS[2],
            _ => COLORS[i % COLORS.len()],
        };
        let style = ShapeStyle::from(color).stroke_width(3);
        let points: Vec<(i32, i32)> = s
            .points
            .iter()
            .map(|p| (self.px(x_of(self.x_axis, p)), self.py(p.2)))
            .collect();
        match points.len() {
            0 => {}
            1 => root.draw(&Circle::new(points[0], 4, style.filled()))?,
            _ => root.draw(&PathElement::new(points, style))?,
        }
        let (x1, ly) = (self.x1, self.y0 + 10 + 44 * i as i32);
        root.draw(&PathElement::new(
            vec![(x1 + 16, ly + 7), (x1 + 46, ly + 7)],
            style,
        ))?;
        text(root, x1 + 54, ly, s.label, 2, INK, Align::Left)?;
        let avg = format!("avg {:.0}/s", s.average);
        text(root, x1 + 54, ly + 18, &avg, 2, INK, Align::Left)
    }
}

/// The horizontal coordinate of point `p` on axis `x_axis`.
fn x_of(x_axis: XAxis, p: &(f64, u64, f64)) -> f64 {
    match x_axis {
        XAxis::Seconds => p.0,
        XAxis::Files => p.1 as f64,
    }
}

/// Horizontal bars: for each of `rows` (a step, a phase), one bar per series (a
/// target), on a logarithmic axis of `unit` spanning whole decades; each bar labelled
/// with its value.
pub fn bars(
    path: &Path,
    heading: &str,
    unit: &str,
    rows: &[String],
    series: &[(&str, Vec<Option<f64>>)],
) -> Result<()> {
    const BAR: i32 = 20;
    let per_row = BAR * series.len().max(1) as i32 + 16;
    let height = (TOP + BOTTOM) as u32 + (per_row * rows.len().max(1) as i32) as u32;
    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let ink = RGBColor(40, 40, 40);
    let values = || series.iter().flat_map(|(_, v)| v.iter().flatten().copied());
    let lo = values().fold(f64::MAX, f64::min).max(1e-3);
    let hi = values().fold(0.0, f64::max).max(lo * 10.0);
    let (d0, d1) = (lo.log10().floor(), hi.log10().ceil());
    let (x0, x1) = (LEFT + 260, WIDTH as i32 - RIGHT);
    let px = |v: f64| {
        let f = (v.max(lo).log10() - d0) / (d1 - d0);
        x0 + (f * (x1 - x0) as f64) as i32
    };
    text(&root, WIDTH as i32 / 2, 14, heading, 2, ink, Align::Center).map_err(err)?;
    let y_end = TOP + per_row * rows.len() as i32;
    let mut d = d0;
    while d <= d1 {
        let x = px(10f64.powf(d));
        root.draw(&PathElement::new(
            vec![(x, TOP - 6), (x, y_end)],
            ShapeStyle::from(RGBColor(220, 220, 220)),
        ))
        .map_err(err)?;
        text(
            &root,
            x,
            y_end + 8,
            &short(10f64.powf(d)),
            2,
            ink,
            Align::Center,
        )
        .map_err(err)?;
        d += 1.0;
    }
    text(
        &root,
        (x0 + x1) / 2,
        y_end + 34,
        unit,
        2,
        ink,
        Align::Center,
    )
    .map_err(err)?;
    for (r, row) in rows.iter().enumerate() {
        let y = TOP + per_row * r as i32;
        text(&root, x0 - 10, y + 4, row, 2, ink, Align::Right).map_err(err)?;
        for (k, (_, vals)) in series.iter().enumerate() {
            let Some(v) = vals.get(r).copied().flatten() else {
                continue;
            };
            let by = y + BAR * k as i32;
            let color = COLORS[k % COLORS.len()];
            root.draw(&Rectangle::new(
                [(x0, by), (px(v), by + BAR - 3)],
                color.filled(),
            ))
            .map_err(err)?;
            text(&root, px(v) + 6, by + 1, &short(v), 2, ink, Align::Left).map_err(err)?;
        }
    }
    for (k, (label, _)) in series.iter().enumerate() {
        let ly = TOP + 24 * k as i32;
        let color = COLORS[k % COLORS.len()];
        root.draw(&Rectangle::new(
            [(x1 + 20, ly), (x1 + 44, ly + 12)],
            color.filled(),
        ))
        .map_err(err)?;
        text(&root, x1 + 52, ly, label, 2, ink, Align::Left).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_bars() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.png");
        let rows = vec!["tar x".to_string(), "find".to_string()];
        let series = [
            ("fuse", vec![Some(3.5), Some(0.1)]),
            ("plain", vec![Some(0.86), None]),
        ];
        bars(&p, "everyday", "seconds", &rows, &series).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert!(bytes.len() > 1000 && &bytes[1..4] == b"PNG");
    }

    #[test]
    fn draws_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.png");
        let a = [(1.0, 100, 50_000.0), (2.0, 200, 40_000.0)];
        let b = [(5.0, 200, 8_000.0)];
        let series = [
            Series {
                label: "lib",
                average: 45_000.0,
                points: &a,
            },
            Series {
                label: "fuse",
                average: 8_000.0,
                points: &b,
            },
            Series {
                label: "plain",
                average: 0.0,
                points: &[],
            },
        ];
        for x in [XAxis::Seconds, XAxis::Files] {
            create_rate(&p, "test", x, &series).unwrap();
            let bytes = std::fs::read(&p).unwrap();
            assert_eq!(&bytes[1..4], b"PNG");
        }
    }
}
