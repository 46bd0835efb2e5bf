//! The report's PNG charts: one per workload.

use std::path::Path;

use super::{compare, human, thesis_best_slowdown, Compared, Row, PROVIDERS};

/// Draws the relative metrics of one workload (bandwidth overhead, cost
/// multiplier at AWS S3, relative response time, slowdown) per block size and
/// configuration, log scale, with the thesis's best slowdown as a dashed line.
/// Without a font, the chart has no text.
pub fn chart(rows: &[Row], workload: &str, path: &Path, with_text: bool) -> Result<(), String> {
    use plotters::prelude::*;
    let cmp: Vec<Compared<'_>> = compare(rows)
        .into_iter()
        .filter(|c| c.row.workload == workload && c.row.config != "baseline")
        .collect();
    if cmp.is_empty() {
        return Err(format!("{workload}: nothing to chart"));
    }
    let metrics: [(&str, RGBColor); 5] = [
        ("bandwidth overhead", RGBColor(31, 119, 180)),
        ("cost multiplier (AWS S3)", RGBColor(255, 127, 14)),
        ("relative response time", RGBColor(44, 160, 44)),
        ("slowdown (workflow)", RGBColor(214, 39, 40)),
        ("slowdown (main stages)", RGBColor(148, 103, 189)),
    ];
    let values: Vec<[f64; 5]> = cmp
        .iter()
        .map(|c| {
            [
                c.row.bandwidth_overhead(),
                c.cost_multiplier(&PROVIDERS[0]),
                c.relative_response(),
                c.slowdown(),
                c.main_slowdown(),
            ]
        })
        .collect();
    let finite = values
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0);
    let ymax = finite
        .clone()
        .fold(1.0f64, f64::max)
        .max(thesis_best_slowdown(workload).unwrap_or(1.0))
        * 2.0;
    let ymin = finite.fold(1.0f64, f64::min).min(1.0) / 2.0;
    let n = cmp.len() as f64;
    let err = |e: &dyn std::fmt::Display| format!("chart {}: {e}", path.display());
    // About 128 pixels per configuration, so that the labels do not overlap.
    let width = (cmp.len() as u32 * 128 + 140).max(1280);
    let root = BitMapBackend::new(path, (width, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20)
        .x_label_area_size(70)
        .y_label_area_size(if with_text { 70 } else { 10 });
    if with_text {
        b.caption(
            format!("{workload}: overheads relative to no ORAM (log scale, lower is better)"),
            ("sans-serif", 24),
        );
    }
    let mut chart = b
        .build_cartesian_2d(0f64..n, (ymin..ymax).log_scale())
        .map_err(|e| err(&e))?;
    if with_text {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .y_desc("× baseline")
            .y_label_formatter(&|v| format!("{v}"))
            .draw()
            .map_err(|e| err(&e))?;
    }
    for (i, vals) in values.iter().enumerate() {
        for (k, v) in vals.iter().enumerate() {
            if !v.is_finite() || *v <= 0.0 {
                continue;
            }
            let x0 = i as f64 + 0.075 + 0.17 * k as f64;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, ymin), (x0 + 0.15, *v)],
                    metrics[k].1.filled(),
                )))
                .map_err(|e| err(&e))?;
        }
    }
    if let Some(t) = thesis_best_slowdown(workload) {
        let s = chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, t), (n, t)],
                8,
                6,
                BLACK.stroke_width(2),
            ))
            .map_err(|e| err(&e))?;
        if with_text {
            s.label(format!("thesis's best slowdown ({t}×)"))
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2))
                });
        }
    }
    if with_text {
        for (name, color) in metrics {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
        // Two lines under each group, centred: the engine, then the model and block.
        for (i, c) in cmp.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(i as f64 + 0.5, ymin));
            let (engine, model) = c.row.config.split_once('@').unwrap_or((&c.row.config, ""));
            let second = if model.is_empty() {
                human(c.row.block_size)
            } else {
                format!("{model} {}", human(c.row.block_size))
            };
            for (line, text) in [engine.to_string(), second].into_iter().enumerate() {
                let half = (text.chars().count() * 4) as i32;
                root.draw(&Text::new(
                    text,
                    (px - half, py + 8 + 18 * line as i32),
                    ("sans-serif", 15).into_font(),
                ))
                .map_err(|e| err(&e))?;
            }
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Registers a font for the charts: `$ORAM_WORKLOAD_FONT` or a common system
/// font. Returns whether one was found.
pub fn load_font() -> bool {
    let candidates = std::env::var("ORAM_WORKLOAD_FONT").into_iter().chain(
        [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
        ]
        .map(String::from),
    );
    for c in candidates {
        if let Ok(bytes) = std::fs::read(&c) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(
                "sans-serif",
                plotters::style::FontStyle::Normal,
                bytes,
            )
            .is_ok()
            {
                return true;
            }
        }
    }
    false
}

/// Redraws `<dir>/<workload>.png` for every workload of `<dir>/results.csv`.
pub fn replot(dir: &Path) -> Result<bool, String> {
    let path = dir.join("results.csv");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows = super::rows_from_csv(&text)?;
    for (_, file) in draw_charts(&rows, dir, load_font())? {
        println!("chart: {}", dir.join(file).display());
    }
    Ok(true)
}

/// Draws `<dir>/<workload>.png` for every workload with a configuration besides
/// the baseline; returns (workload, file name) of each.
pub fn draw_charts(rows: &[Row], dir: &Path, font: bool) -> Result<Vec<(String, String)>, String> {
    let mut charts = Vec::new();
    let mut names: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    names.dedup();
    for w in names {
        if rows
            .iter()
            .any(|r| r.workload == w && r.config != "baseline")
        {
            let file = format!("{w}.png");
            chart(rows, w, &dir.join(&file), font)?;
            charts.push((w.to_string(), file));
        }
    }
    Ok(charts)
}
