//! Drawing helpers shared by the benchmark plots (`plot`) and the file-system
//! benchmark plots (`fsplot`): axis steps and labels, and text drawn from an 8×8 bitmap
//! font (so that plots need no system fonts).

use plotters::prelude::{
    Color, DrawingArea, DrawingAreaErrorKind, DrawingBackend, RGBColor, Rectangle,
};

/// A round step for about `ticks` ticks up to `max`, and the axis end (a multiple of it).
pub fn nice(max: f64, ticks: f64) -> (f64, f64) {
    let raw = max / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (step, (max / step).ceil().max(1.0) * step)
}

/// A tick label of a time axis with ticks `step` apart.
pub fn tick(x: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{x:.0}")
    } else if step >= 0.1 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// 1500000 → "1.5M", 250000 → "250k", 20 → "20", 2.5 → "2.5".
pub fn short(y: f64) -> String {
    if y >= 1e6 {
        format!("{}M", trim(y / 1e6))
    } else if y >= 1e3 {
        format!("{}k", trim(y / 1e3))
    } else {
        trim(y)
    }
}

/// `x` with at most two decimals and no trailing zeros.
pub fn trim(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The distinct values of `it`, in the order they first come (the targets, steps or
/// process counts of a table or a plot, in the order they ran).
pub fn distinct<T: PartialEq + Copy>(it: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for v in it {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Horizontal anchoring of [`text`].
#[derive(Clone, Copy)]
pub enum Align {
    Left,
    Center,
    Right,
}

/// Draws ASCII `s` with its top at `y`, each font pixel a `scale`×`scale` square.
pub fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    x: i32,
    y: i32,
    s: &str,
    scale: i32,
    color: RGBColor,
    align: Align,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let width = 8 * scale * s.chars().count() as i32;
    let mut left = match align {
        Align::Left => x,
        Align::Center => x - width / 2,
        Align::Right => x - width,
    };
    for ch in s.chars() {
        let code = if ch.is_ascii() {
            ch as usize
        } else {
            b'?' as usize
        };
        let glyph = font8x8::legacy::BASIC_LEGACY[code];
        for (row, bits) in glyph.iter().enumerate() {
            for col in 0..8 {
                if bits & (1 << col) != 0 {
                    let (gx, gy) = (left + col * scale, y + row as i32 * scale);
                    area.draw(&Rectangle::new(
                        [(gx, gy), (gx + scale - 1, gy + scale - 1)],
                        color.filled(),
                    ))?;
                }
            }
        }
        left += 8 * scale;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_labels() {
        assert_eq!(nice(10.0, 5.0), (2.0, 10.0));
        assert_eq!(nice(7.3, 5.0), (2.0, 8.0));
        assert_eq!(nice(230_000.0, 5.0), (50_000.0, 250_000.0));
        assert_eq!(nice(10.0, 6.0), (2.0, 10.0));
        assert_eq!(nice(1_000_000.0, 6.0), (200_000.0, 1_000_000.0));
        assert_eq!(short(1_500_000.0), "1.5M");
        assert_eq!(short(250_000.0), "250k");
        assert_eq!(short(20.0), "20");
        assert_eq!(short(2.5), "2.5");
        assert_eq!(distinct([3, 1, 3, 2, 1]), vec![3, 1, 2]);
        assert_eq!(tick(2.0, 1.0), "2");
        assert_eq!(tick(0.25, 0.1), "0.2");
    }
}
