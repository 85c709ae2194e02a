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

/// One row read back: what the verdict needs of a run (goodput, replica-hours, oscillations).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadRow {
    pub trace: String,
    pub startup: u64,
    pub family: String,
    pub setting: String,
    pub defaults: bool,
    pub seed: u64,
    /// The run's outcome as far as the columns carry it: requests judged and met, replica
    /// seconds, scale actions, oscillations, lost; the latency percentiles and the rest default.
    pub outcome: Outcome,
}

/// Why a results file cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read the results file")]
    Csv(#[from] csv::Error),
    #[error("the results file has no column {column}")]
    Missing { column: &'static str },
    #[error("row {row}: column {column} is not what the lab writes: {value:?}")]
    Column {
        row: u64,
        column: String,
        value: String,
    },
}

/// The columns [`read`] takes, by the names [`write`] gives them.
#[derive(serde::Deserialize)]
struct Record {
    trace: String,
    startup_s: u64,
    family: String,
    setting: String,
    defaults: bool,
    seed: u64,
    arrived: u64,
    judged: u64,
    attained: f64,
    slow_streams: u64,
    replica_hours: f64,
    scale_actions: u32,
    oscillations: u32,
    wasted_cold_starts: u32,
    warm_evictions: u32,
    lost: u64,
}

/// The rows of a file [`write`] wrote, for judging new runs against runs of an earlier build
/// (`make lab ARGS="--only operator --peers-from FILE"`).
pub fn read<R: std::io::Read>(input: R) -> Result<Vec<ReadRow>, ReadError> {
    let mut reader = csv::Reader::from_reader(input);
    let headers = reader.headers()?.clone();
    if let Some(column) = COLUMNS.iter().find(|c| !headers.iter().any(|h| h == **c)) {
        return Err(ReadError::Missing { column });
    }
    let mut rows = Vec::new();
    for (row, record) in (1..).zip(reader.records()) {
        let record = record?;
        let r: Record = record
            .deserialize(Some(&headers))
            .map_err(|error| match error.kind() {
                // Name the column and show the text the lab would not have written.
                csv::ErrorKind::Deserialize { err, .. } => match err.field() {
                    Some(field) => ReadError::Column {
                        row,
                        column: headers.get(field as usize).unwrap_or("?").to_owned(),
                        value: record.get(field as usize).unwrap_or("").to_owned(),
                    },
                    None => ReadError::Csv(error),
                },
                _ => ReadError::Csv(error),
            })?;
        rows.push(ReadRow {
            trace: r.trace,
            startup: r.startup_s,
            family: r.family,
            setting: r.setting,
            defaults: r.defaults,
            seed: r.seed,
            outcome: Outcome {
                arrived: r.arrived,
                judged: r.judged,
                // Written to six decimals: exact for any run of under a million requests.
                met: (r.attained * r.judged as f64).round() as u64,
                slow_streams: r.slow_streams,
                lost: r.lost,
                replica_seconds: r.replica_hours * 3600.0,
                scale_actions: r.scale_actions,
                oscillations: r.oscillations,
                wasted_cold_starts: r.wasted_cold_starts,
                warm_evictions: r.warm_evictions,
                ..Outcome::default()
            },
        });
    }
    Ok(rows)
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

    #[test]
    fn what_the_verdict_needs_reads_back_as_written() {
        let outcome = Outcome {
            arrived: 12_345,
            judged: 12_001,
            met: 11_890,
            lost: 3,
            replica_seconds: 26.8 * 3600.0,
            scale_actions: 17,
            oscillations: 4,
            ..Outcome::default()
        };
        let row = Row {
            trace: "azure-conversation",
            startup: 300,
            family: "KEDA",
            setting: "KEDA (target 0.3, KV)",
            defaults: false,
            seed: 7,
            outcome: &outcome,
            bound: 20.0,
        };
        let mut out = Vec::new();
        write(&mut out, [row]).unwrap();
        let back = read(out.as_slice()).unwrap();
        assert_eq!(back.len(), 1);
        let r = &back[0];
        assert_eq!(
            (
                r.trace.as_str(),
                r.startup,
                r.family.as_str(),
                r.setting.as_str()
            ),
            ("azure-conversation", 300, "KEDA", "KEDA (target 0.3, KV)")
        );
        assert_eq!((r.defaults, r.seed), (false, 7));
        assert_eq!((r.outcome.judged, r.outcome.met), (12_001, 11_890));
        assert_eq!(r.outcome.miss_rate(), outcome.miss_rate());
        assert!((r.outcome.replica_hours() - 26.8).abs() < 1e-6);
        assert_eq!((r.outcome.oscillations, r.outcome.lost), (4, 3));

        let text = String::from_utf8(out).unwrap();
        let broken = text.replace("azure-conversation,300,", "azure-conversation,soon,");
        let error = read(broken.as_bytes()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "row 1: column startup_s is not what the lab writes: \"soon\""
        );
        let error = read("trace,startup_s\nsteady,180\n".as_bytes()).unwrap_err();
        assert_eq!(error.to_string(), "the results file has no column family");
    }
}
