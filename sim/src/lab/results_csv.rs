//! The lab's machine-readable result: one CSV row per (trace, start-up delay, policy setting,
//! seed), beside the markdown report, for anyone who wants to plot or test the numbers again.

use std::io::Write;

use crate::lab::run::Outcome;

/// The columns, in order.
pub const COLUMNS: [&str; 21] = [
    "trace",
    "startup_s",
    "family",
    "setting",
    "defaults",
    "seed",
    "arrived",
    "judged",
    "attained",
    "slow_streams",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "tpot_p95_s",
    "replica_hours",
    "bound_replica_hours",
    "scale_actions",
    "oscillations",
    "wasted_cold_starts",
    "warm_evictions",
    "lost",
];

/// One policy setting's run on one seed of one cell.
pub struct Row<'a> {
    pub trace: &'a str,
    pub startup: u64,
    pub family: &'a str,
    pub setting: &'a str,
    pub defaults: bool,
    pub seed: u64,
    pub outcome: &'a Outcome,
    /// The cost bound of the seed's workload.
    pub bound: f64,
}

/// Writes the header and `rows`.
pub fn write<'a, W: Write>(out: W, rows: impl IntoIterator<Item = Row<'a>>) -> csv::Result<()> {
    let mut writer = csv::Writer::from_writer(out);
    writer.write_record(COLUMNS)?;
    for row in rows {
        let o = row.outcome;
        let number = |v: f64| {
            if v.is_finite() {
                format!("{v:.6}")
            } else {
                "inf".to_owned()
            }
        };
        writer.write_record([
            row.trace.to_owned(),
            row.startup.to_string(),
            row.family.to_owned(),
            row.setting.to_owned(),
            row.defaults.to_string(),
            row.seed.to_string(),
            o.arrived.to_string(),
            o.judged.to_string(),
            number(1.0 - o.miss_rate()),
            o.slow_streams.to_string(),
            number(o.ttft_p50),
            number(o.ttft_p95),
            number(o.ttft_p99),
            number(o.tpot_p95),
            number(o.replica_hours()),
            number(row.bound),
            o.scale_actions.to_string(),
            o.oscillations.to_string(),
            o.wasted_cold_starts.to_string(),
            o.warm_evictions.to_string(),
            o.lost.to_string(),
        ])?;
    }
    writer.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_per_run_with_a_label_that_holds_a_comma() {
        let outcome = Outcome {
            arrived: 10,
            judged: 8,
            met: 6,
            lost: 1,
            ttft_p99: f64::INFINITY,
            replica_seconds: 7200.0,
            ..Outcome::default()
        };
        let rows = [
            ("KEDA (min 1)", false, 0),
            ("llmscaleoperator (sum, AverageValue)", false, 1),
        ]
        .map(|(setting, defaults, seed)| Row {
            trace: "azure-code",
            startup: 180,
            family: "operator",
            setting,
            defaults,
            seed,
            outcome: &outcome,
            bound: 1.5,
        });
        let mut out = Vec::new();
        write(&mut out, rows).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        assert_eq!(
            reader.headers().unwrap().iter().collect::<Vec<_>>(),
            COLUMNS
        );
        let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert_eq!(&records[1][3], "llmscaleoperator (sum, AverageValue)");
        assert_eq!(&records[0][8], "0.750000", "6 of 8 judged attained");
        assert_eq!(&records[0][12], "inf");
        assert_eq!(&records[0][14], "2.000000");
        assert_eq!(&records[0][15], "1.500000");
    }
}
