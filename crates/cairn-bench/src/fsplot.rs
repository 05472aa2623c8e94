//! PNG plots of `cairn fs-bench` (and of `cairn cluster-bench`, which draws its runs the
//! same way): the create rate of every target over the run, a line per target, on a
//! logarithmic rate axis (like the throughput timeline of the TableFS paper),
//! against elapsed time and against files created.
//!
//! No system font is needed: text is drawn from the 8×8 bitmap font of `font8x8`,
//! scaled, pixel by pixel; plotters draws only lines and rectangles.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

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
    let x_of = |p: &(f64, u64, f64)| match x_axis {
        XAxis::Seconds => p.0,
        XAxis::Files => p.1 as f64,
    };
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x_max = all().map(x_of).fold(0.0, f64::max).max(1e-3);
    // The rate axis spans whole decades around every rate.
    let (lo, hi) = all()
        .map(|p| p.2.max(1.0))
        .fold((f64::MAX, 1.0f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
    let lo = if lo == f64::MAX { 1.0 } else { lo };
    let d_lo = lo.log10().floor() as i32;
    let d_hi = (hi.log10().ceil() as i32).max(d_lo + 1);
    let (x_step, x_end) = nice(x_max, 6.0);
    let (x0, x1) = (LEFT, WIDTH as i32 - RIGHT);
    let (y0, y1) = (TOP, HEIGHT as i32 - BOTTOM);
    let px = |x: f64| x0 + ((x / x_end) * (x1 - x0) as f64).round() as i32;
    let py = |r: f64| {
        let f = (r.max(1.0).log10() - d_lo as f64) / (d_hi - d_lo) as f64;
        y1 - (f * (y1 - y0) as f64).round() as i32
    };
    let grid = RGBColor(225, 225, 225);
    let fine = RGBColor(242, 242, 242);
    let ink = RGBColor(40, 40, 40);

    // Vertical grid and labels of the horizontal axis.
    let mut x = 0.0;
    while x <= x_end + x_step * 1e-6 {
        root.draw(&PathElement::new(vec![(px(x), y0), (px(x), y1)], grid))
            .map_err(err)?;
        let label = match x_axis {
            XAxis::Seconds => tick(x, x_step),
            XAxis::Files => short(x),
        };
        text(&root, px(x), y1 + 10, &label, 2, ink, Align::Center).map_err(err)?;
        x += x_step;
    }
    // Horizontal grid: each decade labelled, 2× and 5× lighter and labelled when there
    // are few decades.
    for d in d_lo..=d_hi {
        for m in [1.0, 2.0, 5.0] {
            let r = m * 10f64.powi(d);
            if d == d_hi && m > 1.0 {
                break;
            }
            let major = m == 1.0;
            root.draw(&PathElement::new(
                vec![(x0, py(r)), (x1, py(r))],
                if major { grid } else { fine },
            ))
            .map_err(err)?;
            if major || d_hi - d_lo <= 2 {
                text(&root, x0 - 8, py(r) - 8, &short(r), 2, ink, Align::Right).map_err(err)?;
            }
        }
    }
    root.draw(&Rectangle::new([(x0, y0), (x1, y1)], ink))
        .map_err(err)?;
    let x_title = match x_axis {
        XAxis::Seconds => "seconds",
        XAxis::Files => "files in the directory",
    };
    text(
        &root,
        (x0 + x1) / 2,
        y1 + 40,
        x_title,
        2,
        ink,
        Align::Center,
    )
    .map_err(err)?;
    text(
        &root,
        12,
        y0 - 26,
        "creates/s (log scale)",
        2,
        ink,
        Align::Left,
    )
    .map_err(err)?;
    text(&root, WIDTH as i32 / 2, 14, heading, 2, ink, Align::Center).map_err(err)?;

    // A line per target, and the legend with its average.
    for (i, s) in series.iter().enumerate() {
        let color = match s.label {
            "lib" => COLORS[0],
            "fuse" => COLORS[1],
            "fuse-classic" | "xfs" => COLORS[3],
            "btrfs" => COLORS[4],
            "plain" => COLORS[2],
            _ => COLORS[i % COLORS.len()],
        };
        let style = ShapeStyle::from(color).stroke_width(3);
        let points: Vec<(i32, i32)> = s.points.iter().map(|p| (px(x_of(p)), py(p.2))).collect();
        match points.len() {
            0 => {}
            1 => {
                root.draw(&Circle::new(points[0], 4, style.filled()))
                    .map_err(err)?;
            }
            _ => {
                root.draw(&PathElement::new(points, style)).map_err(err)?;
            }
        }
        let ly = y0 + 10 + 44 * i as i32;
        root.draw(&PathElement::new(
            vec![(x1 + 16, ly + 7), (x1 + 46, ly + 7)],
            style,
        ))
        .map_err(err)?;
        text(&root, x1 + 54, ly, s.label, 2, ink, Align::Left).map_err(err)?;
        let avg = format!("avg {:.0}/s", s.average);
        text(&root, x1 + 54, ly + 18, &avg, 2, ink, Align::Left).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
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
