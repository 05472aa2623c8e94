//! PNG plots of throughput over time, one per (suite, test), a line per engine; for the
//! KFS suite, the mean time by file size with standard-deviation bars, one per operation.
//!
//! No system font is needed: text is drawn from the 8×8 bitmap font of `font8x8`,
//! scaled, pixel by pixel; plotters draws only lines and rectangles.

use std::fs;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::{
    BitMapBackend, Circle, DrawResult, DrawingArea, DrawingAreaErrorKind, IntoDrawingArea,
    PathElement, RGBColor, Rectangle, ShapeStyle, WHITE,
};

use super::kfs::{self, Summary};
use super::{Report, SuiteRun};
use crate::chart::{nice, short, text, tick, trim, Align};

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 560;
const LEFT: i32 = 100;
const RIGHT: i32 = 200;
const TOP: i32 = 60;
const BOTTOM: i32 = 70;

/// Line colours, cairn's first.
const COLORS: [RGBColor; 8] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

/// Writes every plot into `dir`; returns how many.
pub fn all(report: &Report, dir: &Path) -> Result<usize> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = 0;
    let mut suites: Vec<&str> = Vec::new();
    for run in &report.runs {
        if !suites.contains(&run.suite.as_str()) {
            suites.push(&run.suite);
        }
    }
    for suite in suites {
        let runs: Vec<&SuiteRun> = report.runs.iter().filter(|r| r.suite == suite).collect();
        let mut tests: Vec<(&str, &str)> = Vec::new();
        for run in &runs {
            for p in &run.phases {
                if !p.timeline.is_empty() && !tests.iter().any(|(t, _)| *t == p.test) {
                    tests.push((&p.test, &p.title));
                }
            }
        }
        for (test, title) in tests {
            let series: Vec<(&str, f64, &[f64])> = runs
                .iter()
                .filter_map(|r| {
                    let p = r.phases.iter().find(|p| p.test == test)?;
                    Some((
                        r.engine.as_str(),
                        p.timeline_interval_secs,
                        p.timeline.as_slice(),
                    ))
                })
                .collect();
            let name = format!("{suite}-{}.png", test.replace(['.', ' '], "-"));
            let heading = format!("{suite}: {title} - throughput over time");
            throughput(&dir.join(name), &heading, &series)?;
            written += 1;
        }
    }
    written += kfs_plots(report, dir)?;
    Ok(written)
}

/// The KFS suite's plots, one per operation: the mean time by file size with error bars
/// of one standard deviation, a series per subject (as KFS's figures). Returns how
/// many it wrote.
fn kfs_plots(report: &Report, dir: &Path) -> Result<usize> {
    let runs: Vec<&SuiteRun> = report
        .runs
        .iter()
        .filter(|r| r.suite == kfs::SUITE.name && r.error.is_none() && !r.samples.is_empty())
        .collect();
    let sizes = &report.config.kfs_sizes;
    // Plain numbers fit under the axis; "128 MiB" would not.
    let in_mib = sizes.iter().all(|s| s % (1 << 20) == 0);
    let labels: Vec<String> = if in_mib {
        sizes.iter().map(|s| (s >> 20).to_string()).collect()
    } else {
        sizes.iter().map(|s| kfs::size_label(*s)).collect()
    };
    let axis = if in_mib {
        "file size (MiB)"
    } else {
        "file size"
    };
    let mut written = 0;
    for op in kfs::FIGURES {
        let series: Vec<(&str, Vec<Option<Summary>>)> = runs
            .iter()
            .map(|r| {
                let points = sizes
                    .iter()
                    .map(|s| kfs::samples(r, &kfs::test_name(op, *s)).and_then(kfs::summarize))
                    .collect();
                (r.engine.as_str(), points)
            })
            .collect();
        if series.iter().all(|(_, v)| v.iter().all(Option::is_none)) {
            continue;
        }
        let short = match op {
            "write" if report.config.sync => "write (--sync)",
            "write" => "write (page cache)",
            kfs::DURABLE_WRITE => "durable write",
            other => other,
        };
        let heading = format!("kfs {short}: time by size (mean, bars 1 sd)");
        error_bars(
            &dir.join(format!("kfs-{op}.png")),
            &heading,
            axis,
            &labels,
            &series,
        )?;
        written += 1;
    }
    Ok(written)
}

/// One plot of means with ±1 standard deviation bars over categories (`labels`, named
/// `axis`), on a logarithmic time axis: `(series name, summary of each category)`.
fn error_bars(
    path: &Path,
    heading: &str,
    axis: &str,
    labels: &[String],
    series: &[(&str, Vec<Option<Summary>>)],
) -> Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let frame = TimeFrame::of(series, labels.len());
    frame.draw(&root, labels, (axis, heading)).map_err(err)?;
    for (k, (name, summaries)) in series.iter().enumerate() {
        frame
            .draw_series(&root, (k, series.len()), name, summaries)
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// A bitmap to draw on.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// The frame of [`error_bars`]: its box, its logarithmic time axis (whole decades from
/// `10^lo` to `10^hi` seconds), and the slot of each category.
struct TimeFrame {
    x0: i32,
    x1: i32,
    y0: i32,
    y1: i32,
    lo: f64,
    hi: f64,
    slot: f64,
}

const GRID: RGBColor = RGBColor(225, 225, 225);
const INK: RGBColor = RGBColor(40, 40, 40);

impl TimeFrame {
    /// The frame that holds every bar of `series` over `categories` slots.
    fn of(series: &[(&str, Vec<Option<Summary>>)], categories: usize) -> TimeFrame {
        let points = || series.iter().flat_map(|(_, v)| v.iter().flatten());
        let lowest = points()
            .map(|s| {
                if s.mean - s.sd > 0.0 {
                    s.mean - s.sd
                } else {
                    s.mean
                }
            })
            .filter(|x| *x > 0.0)
            .fold(f64::INFINITY, f64::min);
        let highest = points().map(|s| s.mean + s.sd).fold(0.0, f64::max);
        let (lowest, highest) = if lowest.is_finite() && highest > 0.0 {
            (lowest, highest.max(lowest * 1.01))
        } else {
            (1e-3, 1.0)
        };
        let lo = lowest.log10().floor();
        let hi = highest.log10().ceil().max(lo + 1.0);
        // Room on the right for legends of up to 13 characters ("cairn-1shard").
        let (x0, x1) = (LEFT, WIDTH as i32 - RIGHT - 70);
        let (y0, y1) = (TOP, HEIGHT as i32 - BOTTOM);
        let n = categories.max(1);
        TimeFrame {
            x0,
            x1,
            y0,
            y1,
            lo,
            hi,
            slot: (x1 - x0) as f64 / n as f64,
        }
    }

    /// The row of time `y` seconds.
    fn py(&self, y: f64) -> i32 {
        let f = (y.max(10f64.powf(self.lo)).log10() - self.lo) / (self.hi - self.lo);
        self.y1 - (f * (self.y1 - self.y0) as f64).round() as i32
    }

    /// The grid, its tick labels (1, 2 and 5 of every decade; the categories' `labels`),
    /// the box, the axis titles and the plot's heading.
    fn draw(
        &self,
        root: &Area<'_>,
        labels: &[String],
        (axis, heading): (&str, &str),
    ) -> DrawResult<(), BitMapBackend<'_>> {
        let (x0, x1, y0, y1) = (self.x0, self.x1, self.y0, self.y1);
        let mut decade = self.lo as i32;
        while decade < self.hi as i32 {
            for m in [1.0, 2.0, 5.0] {
                let y = m * 10f64.powi(decade);
                root.draw(&PathElement::new(
                    vec![(x0, self.py(y)), (x1, self.py(y))],
                    GRID,
                ))?;
                let label = time_tick(y);
                text(root, x0 - 8, self.py(y) - 8, &label, 2, INK, Align::Right)?;
            }
            decade += 1;
        }
        let top = 10f64.powf(self.hi);
        text(
            root,
            x0 - 8,
            self.py(top) - 8,
            &time_tick(top),
            2,
            INK,
            Align::Right,
        )?;
        for (i, label) in labels.iter().enumerate() {
            let x = x0 + ((i as f64 + 0.5) * self.slot).round() as i32;
            root.draw(&PathElement::new(vec![(x, y0), (x, y1)], GRID))?;
            text(root, x, y1 + 10, label, 2, INK, Align::Center)?;
        }
        root.draw(&Rectangle::new([(x0, y0), (x1, y1)], INK))?;
        text(root, (x0 + x1) / 2, y1 + 36, axis, 2, INK, Align::Center)?;
        text(root, 12, y0 - 28, "time (log)", 2, INK, Align::Left)?;
        text(root, WIDTH as i32 / 2, 14, heading, 2, INK, Align::Center)
    }

    /// Series `k` of `of`, named `name`: a bar, a dot and a line through the dots,
    /// shifted a little sideways so that the series' bars stay apart; its legend.
    fn draw_series(
        &self,
        root: &Area<'_>,
        (k, of): (usize, usize),
        name: &str,
        summaries: &[Option<Summary>],
    ) -> DrawResult<(), BitMapBackend<'_>> {
        let spread = (self.slot * 0.5).min(12.0 * of as f64);
        let color = COLORS[k % COLORS.len()];
        let style = ShapeStyle::from(color).stroke_width(if k == 0 { 3 } else { 2 });
        let shift = if of > 1 {
            (k as f64 / (of - 1) as f64 - 0.5) * spread
        } else {
            0.0
        };
        let mut line = Vec::new();
        for (i, s) in summaries.iter().enumerate() {
            let Some(s) = s else { continue };
            let x = self.x0 + ((i as f64 + 0.5) * self.slot + shift).round() as i32;
            let (top, bottom) = (self.py(s.mean + s.sd), self.py(s.mean - s.sd));
            root.draw(&PathElement::new(vec![(x, top), (x, bottom)], style))?;
            // A bar reaching zero runs off the bottom of the log axis: no cap there.
            let capped = if s.mean - s.sd > 0.0 {
                vec![top, bottom]
            } else {
                vec![top]
            };
            for y in capped {
                root.draw(&PathElement::new(vec![(x - 5, y), (x + 5, y)], style))?;
            }
            root.draw(&Circle::new((x, self.py(s.mean)), 4, style.filled()))?;
            line.push((x, self.py(s.mean)));
        }
        if line.len() > 1 {
            root.draw(&PathElement::new(line, style))?;
        }
        let (x1, ly) = (self.x1, self.y0 + 10 + 34 * k as i32);
        root.draw(&PathElement::new(
            vec![(x1 + 16, ly + 7), (x1 + 46, ly + 7)],
            style,
        ))?;
        text(root, x1 + 54, ly, name, 2, INK, Align::Left)
    }
}

/// A tick label of a time axis: "5ms", "20ms", "1s", "200us".
fn time_tick(secs: f64) -> String {
    if secs >= 1.0 {
        format!("{}s", trim(secs))
    } else if secs >= 1e-3 {
        format!("{}ms", trim(secs * 1e3))
    } else {
        format!("{}us", trim(secs * 1e6))
    }
}

/// One throughput-over-time plot: `(engine, interval seconds, ops/s per interval)`.
pub fn throughput(path: &Path, heading: &str, series: &[(&str, f64, &[f64])]) -> Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    // An engine many times slower than the rest would squeeze them all into the left
    // edge: the time axis ends at three times the median run, longer runs are cut.
    let mut lengths: Vec<f64> = series
        .iter()
        .map(|(_, dt, t)| dt * t.len() as f64)
        .collect();
    lengths.sort_by(f64::total_cmp);
    let longest = lengths.last().copied().unwrap_or(0.0);
    let x_max = longest
        .min(3.0 * lengths.get(lengths.len() / 2).copied().unwrap_or(0.0))
        .max(1e-3);
    let shown =
        |dt: f64, t: &[f64]| -> usize { t.len().min(((x_max / dt).ceil() as usize).max(1)) };
    let y_max = series
        .iter()
        .flat_map(|(_, dt, t)| t[..shown(*dt, t)].iter().copied())
        .fold(0.0, f64::max)
        .max(1.0);
    let (x_step, x_end) = nice(x_max, 5.0);
    let (y_step, y_end) = nice(y_max * 1.05, 5.0);
    let (x0, x1) = (LEFT, WIDTH as i32 - RIGHT);
    let (y0, y1) = (TOP, HEIGHT as i32 - BOTTOM);
    let px = |x: f64| x0 + ((x / x_end) * (x1 - x0) as f64).round() as i32;
    let py = |y: f64| y1 - ((y / y_end) * (y1 - y0) as f64).round() as i32;
    let grid = RGBColor(225, 225, 225);
    let ink = RGBColor(40, 40, 40);

    // Grid and tick labels.
    let mut x = 0.0;
    while x <= x_end + x_step * 1e-6 {
        root.draw(&PathElement::new(vec![(px(x), y0), (px(x), y1)], grid))
            .map_err(err)?;
        text(
            &root,
            px(x),
            y1 + 10,
            &tick(x, x_step),
            2,
            ink,
            Align::Center,
        )
        .map_err(err)?;
        x += x_step;
    }
    let mut y = 0.0;
    while y <= y_end + y_step * 1e-6 {
        root.draw(&PathElement::new(vec![(x0, py(y)), (x1, py(y))], grid))
            .map_err(err)?;
        text(&root, x0 - 8, py(y) - 8, &short(y), 2, ink, Align::Right).map_err(err)?;
        y += y_step;
    }
    root.draw(&Rectangle::new([(x0, y0), (x1, y1)], ink))
        .map_err(err)?;
    text(
        &root,
        (x0 + x1) / 2,
        y1 + 36,
        "seconds",
        2,
        ink,
        Align::Center,
    )
    .map_err(err)?;
    text(&root, 12, y0 - 28, "ops/s", 2, ink, Align::Left).map_err(err)?;
    text(&root, WIDTH as i32 / 2, 14, heading, 2, ink, Align::Center).map_err(err)?;

    // One line per engine, and the legend.
    for (i, (engine, dt, timeline)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let style = ShapeStyle::from(color).stroke_width(if i == 0 { 3 } else { 2 });
        let cut = shown(*dt, timeline) < timeline.len();
        let points: Vec<(i32, i32)> = timeline[..shown(*dt, timeline)]
            .iter()
            .enumerate()
            .map(|(k, v)| (px((k as f64 + 0.5) * dt), py(*v)))
            .collect();
        if points.len() == 1 {
            root.draw(&Circle::new(points[0], 4, style.filled()))
                .map_err(err)?;
        } else {
            root.draw(&PathElement::new(points, style)).map_err(err)?;
        }
        let ly = y0 + 10 + 34 * i as i32;
        root.draw(&PathElement::new(
            vec![(x1 + 16, ly + 7), (x1 + 46, ly + 7)],
            style,
        ))
        .map_err(err)?;
        text(&root, x1 + 54, ly, engine, 2, ink, Align::Left).map_err(err)?;
        if cut {
            let note = format!("cut {:.0}s", dt * timeline.len() as f64);
            text(&root, x1 + 54, ly + 17, &note, 2, ink, Align::Left).map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ticks() {
        assert_eq!(time_tick(0.02), "20ms");
        assert_eq!(time_tick(2.0), "2s");
    }
}
