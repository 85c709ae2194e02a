//! Real request logs replayed as lab workloads.
//!
//! The format is the Azure LLM inference trace's CSV, with two optional columns for a shared
//! prompt prefix, so a user can replay their own traffic (`make lab ARGS="--log FILE"`):
//!
//! ```text
//! TIMESTAMP,ContextTokens,GeneratedTokens[,PrefixId,PrefixTokens]
//! 2023-11-16 18:17:03.9799600,4808,10
//! 2023-11-16 18:17:04.0319600,3180,8,repo-42,2900
//! ```
//!
//! `TIMESTAMP` is a date and time (`YYYY-MM-DD HH:MM:SS[.fraction]`, UTC) or a number of seconds;
//! only differences matter. `PrefixId` names a prefix that requests share (a system prompt, a
//! conversation's earlier turns, a repository's context), `PrefixTokens` its length; an empty
//! `PrefixId` means no shared prefix. Rows need not be sorted.
//!
//! A seed replays the log at a stated scale: whole copies of it, each shifted in time by a
//! seeded offset (cyclically, so every copy covers the whole hour), plus one copy thinned to the
//! fraction left over. A copy keeps the log's bursts, silences and length mix; different seeds
//! put them at different instants. A request that cannot fit one pod's KV cache is clipped to
//! it, and counted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::civil::DateTime;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use thiserror::Error;

use super::workload::{Prefix, Request};

/// The columns a log must start with, in this order.
pub const COLUMNS: [&str; 3] = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"];
/// The optional columns after them.
pub const PREFIX_COLUMNS: [&str; 2] = ["PrefixId", "PrefixTokens"];

#[derive(Debug, Error)]
pub enum LogError {
    #[error("cannot read the request log {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the header is {found:?}; a request log starts with TIMESTAMP,ContextTokens,GeneratedTokens (then optionally PrefixId,PrefixTokens)"
    )]
    Header { found: String },
    #[error("line {line}: {problem}")]
    Line { line: usize, problem: LineProblem },
    #[error("the log has no request")]
    Empty,
    #[error("the log is not CSV")]
    Csv(#[source] csv::Error),
}

/// What is wrong with one line of a log.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LineProblem {
    #[error("{found} columns where the header has {expected}")]
    Columns { found: usize, expected: usize },
    #[error("TIMESTAMP {0:?} is neither YYYY-MM-DD HH:MM:SS[.fraction] nor a number of seconds")]
    Timestamp(String),
    #[error("{column} {value:?} is not a whole number of tokens")]
    Tokens { column: &'static str, value: String },
    #[error("PrefixTokens is {prefix}, longer than the prompt's {prompt} tokens")]
    PrefixLonger { prefix: u32, prompt: u32 },
}

/// A log as read: requests from time 0, in arrival order.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestLog {
    /// What the lab calls it (the file's stem).
    pub name: String,
    pub requests: Vec<Request>,
    /// Seconds from the first request to the last.
    pub span: f64,
}

impl RequestLog {
    /// Requests per second over the log's span.
    pub fn rate(&self) -> f64 {
        self.requests.len() as f64 / self.span.max(1.0)
    }
}

/// Reads the log at `path`, named after its file.
pub fn read(path: &Path) -> Result<RequestLog, LogError> {
    let text = std::fs::read_to_string(path).map_err(|source| LogError::Read {
        path: path.to_owned(),
        source,
    })?;
    let name = path
        .file_stem()
        .map_or_else(|| "log".to_owned(), |s| s.to_string_lossy().into_owned());
    parse(&name, &text)
}

/// Reads a log from its text.
pub fn parse(name: &str, text: &str) -> Result<RequestLog, LogError> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        // Lines of the wrong length are told below, with what the header expects.
        .flexible(true)
        .from_reader(text.as_bytes());
    let header = reader.headers().map_err(LogError::Csv)?.clone();
    let columns: Vec<&str> = header.iter().collect();
    let with_prefix = match columns.as_slice() {
        [a, b, c] if [*a, *b, *c] == COLUMNS => false,
        [a, b, c, d, e] if [*a, *b, *c] == COLUMNS && [*d, *e] == PREFIX_COLUMNS => true,
        _ => {
            return Err(LogError::Header {
                found: columns.join(","),
            });
        }
    };
    // Prefix names become small ids, in order of first appearance.
    let mut prefix_ids: BTreeMap<String, u32> = BTreeMap::new();
    let mut rows: Vec<Row> = Vec::new();
    for record in reader.records() {
        let record = record.map_err(LogError::Csv)?;
        let line = record
            .position()
            .map_or(0, |p| usize::try_from(p.line()).unwrap_or(usize::MAX));
        let at_line = |problem| LogError::Line { line, problem };
        if record.len() != columns.len() {
            return Err(at_line(LineProblem::Columns {
                found: record.len(),
                expected: columns.len(),
            }));
        }
        let field = |i: usize| record.get(i).unwrap_or_default();
        let at = instant(field(0))
            .ok_or_else(|| at_line(LineProblem::Timestamp(field(0).to_owned())))?;
        let tokens = |i: usize, column: &'static str| {
            field(i).parse::<u32>().map_err(|_| {
                at_line(LineProblem::Tokens {
                    column,
                    value: field(i).to_owned(),
                })
            })
        };
        let prompt = tokens(1, "ContextTokens")?;
        let output = tokens(2, "GeneratedTokens")?;
        let prefix = if with_prefix && !field(3).is_empty() {
            let length = tokens(4, "PrefixTokens")?;
            if length > prompt {
                return Err(at_line(LineProblem::PrefixLonger {
                    prefix: length,
                    prompt,
                }));
            }
            Some((field(3).to_owned(), length))
        } else {
            None
        };
        rows.push(Row {
            at,
            prompt,
            output,
            prefix,
        });
    }
    let first = rows
        .iter()
        .map(|r| r.at)
        .min_by(|a, b| a.seconds_since(b).total_cmp(&0.0))
        .ok_or(LogError::Empty)?;
    let mut requests: Vec<Request> = rows
        .into_iter()
        .map(
            |Row {
                 at,
                 prompt,
                 output,
                 prefix,
             }| {
                let prefix = prefix.map(|(name, tokens)| {
                    let next = u32::try_from(prefix_ids.len()).unwrap_or(u32::MAX);
                    let id = *prefix_ids.entry(name).or_insert(next);
                    Prefix { id, tokens }
                });
                Request {
                    at: at.seconds_since(&first),
                    prompt,
                    output: output.max(1),
                    prefix,
                }
            },
        )
        .collect();
    requests.sort_by(|a, b| a.at.total_cmp(&b.at));
    let span = requests.last().map_or(0.0, |r| r.at);
    Ok(RequestLog {
        name: name.to_owned(),
        requests,
        span,
    })
}

/// One line of a log, as read.
struct Row {
    at: Instant,
    prompt: u32,
    output: u32,
    /// The prefix's name and length.
    prefix: Option<(String, u32)>,
}

/// A row's time: a civil date and time, or seconds.
#[derive(Debug, Clone, Copy)]
enum Instant {
    Civil(DateTime),
    Seconds(f64),
}

impl Instant {
    /// Seconds from `earlier` to this (a mix of the two kinds counts as zero).
    fn seconds_since(&self, earlier: &Instant) -> f64 {
        match (self, earlier) {
            (Instant::Civil(a), Instant::Civil(b)) => a.duration_since(*b).as_secs_f64(),
            (Instant::Seconds(a), Instant::Seconds(b)) => a - b,
            _ => 0.0,
        }
    }
}

fn instant(text: &str) -> Option<Instant> {
    if let Ok(seconds) = text.parse::<f64>() {
        return seconds.is_finite().then_some(Instant::Seconds(seconds));
    }
    // jiff reads "2023-11-16 18:17:03.9799600" as it reads the 'T' form.
    text.parse::<DateTime>().ok().map(Instant::Civil)
}

/// One seed's replay of a log.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed {
    pub requests: Vec<Request>,
    /// Requests whose prompt and output together did not fit `max_tokens`, clipped to fit.
    pub clipped: usize,
}

/// The log at `scale` times its rate for seed `seed`, over `duration` seconds (the log's span
/// when it is longer): whole copies shifted by seeded offsets, and one thinned to the fraction
/// of `scale` left over. A request longer than `max_tokens` (prompt and output together) keeps
/// its output and loses the start of its prompt.
pub fn replay(log: &RequestLog, scale: f64, seed: u64, duration: f64, max_tokens: u32) -> Replayed {
    let span = log.span.max(1.0);
    let length = duration.min(span);
    let mut rng = Pcg64Mcg::seed_from_u64(seed ^ 0x5EED_106F_11E5_u64);
    let scale = if scale.is_finite() {
        scale.max(0.0)
    } else {
        0.0
    };
    let whole = scale.floor() as u64;
    let fraction = scale - scale.floor();
    let mut requests = Vec::new();
    let mut clipped = 0;
    let copies = whole + u64::from(fraction > 0.0);
    for copy in 0..copies {
        let keep = if copy < whole { 1.0 } else { fraction };
        let offset = rng.random::<f64>() * span;
        for r in &log.requests {
            if keep < 1.0 && rng.random::<f64>() >= keep {
                continue;
            }
            let at = (r.at + offset) % span;
            if at >= length {
                continue;
            }
            let (request, was_clipped) = fit(Request { at, ..*r }, max_tokens);
            clipped += usize::from(was_clipped);
            requests.push(request);
        }
    }
    requests.sort_by(|a, b| a.at.total_cmp(&b.at));
    Replayed { requests, clipped }
}

/// The log's request mix (lengths and prefixes, drawn from its rows) with Poisson arrivals at
/// `rate` for `duration` seconds: what one pod can serve of this traffic is measured on it.
pub fn mix_at_rate(
    log: &RequestLog,
    seed: u64,
    rate: f64,
    duration: f64,
    max_tokens: u32,
) -> Vec<Request> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed ^ 0x0000_A11C_E5ED);
    let mut requests = Vec::new();
    if log.requests.is_empty() || rate <= 0.0 {
        return requests;
    }
    let mut at = 0.0;
    loop {
        // Exponential gaps: a Poisson process.
        at += -(1.0 - rng.random::<f64>()).ln() / rate;
        if at >= duration {
            return requests;
        }
        let row = log.requests[rng.random_range(0..log.requests.len())];
        requests.push(fit(Request { at, ..row }, max_tokens).0);
    }
}

/// The request clipped to `max_tokens` (the start of its prompt goes; an output that alone
/// exceeds it is cut to half of it), and whether it was.
fn fit(request: Request, max_tokens: u32) -> (Request, bool) {
    let max_tokens = max_tokens.max(2);
    if request.prompt.saturating_add(request.output) <= max_tokens {
        return (request, false);
    }
    let output = request.output.min(max_tokens / 2);
    let prompt = request.prompt.min(max_tokens - output).max(1);
    let prefix = request.prefix.map(|p| Prefix {
        tokens: p.tokens.min(prompt),
        ..p
    });
    (
        Request {
            prompt,
            output,
            prefix,
            ..request
        },
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const AZURE: &str = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
        2023-11-16 18:17:03.9799600,4808,10\n\
        2023-11-16 18:17:04.0319600,3180,8\n\
        2023-11-16 18:16:59.9799600,110,27\n";

    #[test]
    fn the_azure_format_is_read_from_its_first_request() {
        let log = parse("code", AZURE).unwrap();
        assert_eq!(log.requests.len(), 3);
        // Unsorted rows are put in order; times are seconds from the earliest.
        assert_eq!(log.requests[0].at, 0.0);
        assert_eq!(log.requests[0].prompt, 110);
        assert!((log.requests[1].at - 4.0).abs() < 1e-9);
        assert!((log.requests[2].at - 4.052).abs() < 1e-9);
        assert!((log.span - 4.052).abs() < 1e-9);
        assert!(log.requests.iter().all(|r| r.prefix.is_none()));
    }

    #[test]
    fn a_midnight_and_seconds_are_read_too() {
        let log = parse(
            "night",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 23:59:59.5,1,1\n2023-11-17 00:00:00.5,1,1\n",
        )
        .unwrap();
        assert!((log.span - 1.0).abs() < 1e-9);
        let log = parse(
            "s",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n10,5,5\n12.5,5,0\n",
        )
        .unwrap();
        assert!((log.span - 2.5).abs() < 1e-9);
        // No request produces nothing: the first token is always generated.
        assert_eq!(log.requests[1].output, 1);
    }

    #[test]
    fn prefixes_are_shared_by_name() {
        let log = parse(
            "p",
            "TIMESTAMP,ContextTokens,GeneratedTokens,PrefixId,PrefixTokens\n\
             0,3000,10,repo-42,2900\n1,500,10,,\n2,3100,10,repo-42,2900\n3,800,10,system,600\n\
             4,900,10,\"tenant, one\",700\n",
        )
        .unwrap();
        let prefixes: Vec<Option<Prefix>> = log.requests.iter().map(|r| r.prefix).collect();
        assert_eq!(
            prefixes,
            [
                Some(Prefix {
                    id: 0,
                    tokens: 2900
                }),
                None,
                Some(Prefix {
                    id: 0,
                    tokens: 2900
                }),
                Some(Prefix { id: 1, tokens: 600 }),
                // A quoted name may hold a comma.
                Some(Prefix { id: 2, tokens: 700 }),
            ]
        );
    }

    #[test]
    fn a_bad_log_says_where_and_what() {
        let header = parse("x", "time,in,out\n1,2,3\n").unwrap_err();
        assert!(header.to_string().contains("\"time,in,out\""), "{header}");
        let cases = [
            (
                "0,1\n",
                LineProblem::Columns {
                    found: 2,
                    expected: 3,
                },
            ),
            (
                "yesterday,1,1\n",
                LineProblem::Timestamp("yesterday".into()),
            ),
            (
                "0,1.5,1\n",
                LineProblem::Tokens {
                    column: "ContextTokens",
                    value: "1.5".into(),
                },
            ),
        ];
        for (row, problem) in cases {
            let text = format!("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,1\n{row}");
            match parse("x", &text) {
                Err(LogError::Line { line, problem: p }) => {
                    assert_eq!((line, p), (3, problem));
                }
                other => panic!("{row}: {other:?}"),
            }
        }
        let longer = parse(
            "x",
            "TIMESTAMP,ContextTokens,GeneratedTokens,PrefixId,PrefixTokens\n0,10,1,a,11\n",
        )
        .unwrap_err();
        assert!(
            longer.to_string().contains("line 2: PrefixTokens is 11"),
            "{longer}"
        );
        assert!(matches!(
            parse("x", "TIMESTAMP,ContextTokens,GeneratedTokens\n"),
            Err(LogError::Empty)
        ));
    }

    fn uniform(n: usize, span: f64) -> RequestLog {
        let requests = (0..n)
            .map(|i| Request {
                at: span * i as f64 / n as f64,
                prompt: 100 + i as u32,
                output: 10,
                prefix: None,
            })
            .collect();
        RequestLog {
            name: "u".into(),
            requests,
            span,
        }
    }

    #[test]
    fn superposed_copies_scale_the_rate_and_keep_the_mix() {
        let log = uniform(1000, 1000.0);
        let twice = replay(&log, 2.0, 1, 1000.0, 10_000);
        assert_eq!(twice.requests.len(), 2000);
        assert_eq!(twice.clipped, 0);
        assert!(twice.requests.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(twice.requests.iter().all(|r| (0.0..1000.0).contains(&r.at)));
        // Each row appears once per copy.
        let mut prompts: Vec<u32> = twice.requests.iter().map(|r| r.prompt).collect();
        prompts.sort_unstable();
        assert!(prompts.chunks(2).all(|pair| pair[0] == pair[1]));
        // A fraction thins one copy: 2.5 × 1000 within a few standard deviations.
        let more = replay(&log, 2.5, 1, 1000.0, 10_000).requests.len();
        assert!((2440..=2560).contains(&more), "{more}");
        let thinned = replay(&log, 0.3, 1, 1000.0, 10_000).requests.len();
        assert!((250..=350).contains(&thinned), "{thinned}");
        // Seeds shift the copies: the same requests at other instants.
        let other = replay(&log, 2.0, 2, 1000.0, 10_000);
        assert_eq!(other.requests.len(), 2000);
        assert_ne!(other.requests, twice.requests);
        assert_eq!(
            replay(&log, 2.0, 1, 1000.0, 10_000),
            twice,
            "one seed, one workload"
        );
        // A shorter run keeps only what falls within it.
        let half = replay(&log, 1.0, 1, 500.0, 10_000).requests;
        assert!((490..=510).contains(&half.len()), "{}", half.len());
        assert!(half.iter().all(|r| r.at < 500.0));
    }

    #[test]
    fn a_request_that_cannot_fit_a_pod_is_clipped_and_counted() {
        let mut log = uniform(3, 3.0);
        log.requests[1].prompt = 40_000;
        log.requests[1].prefix = Some(Prefix {
            id: 0,
            tokens: 39_000,
        });
        log.requests[2].output = 50_000;
        let replayed = replay(&log, 1.0, 1, 3.0, 32_768);
        assert_eq!(replayed.clipped, 2);
        for r in &replayed.requests {
            assert!(r.prompt + r.output <= 32_768, "{r:?}");
            assert!(r.prefix.is_none_or(|p| p.tokens <= r.prompt), "{r:?}");
        }
        let long_prompt = replayed
            .requests
            .iter()
            .find(|r| r.prompt > 30_000)
            .unwrap();
        assert_eq!(long_prompt.output, 10, "the output is kept");
        assert!(replayed.requests.iter().any(|r| r.output == 16_384));
    }

    #[test]
    fn the_mix_at_a_rate_draws_the_logs_rows() {
        let log = uniform(50, 50.0);
        let mix = mix_at_rate(&log, 3, 4.0, 500.0, 10_000);
        assert!((1800..=2200).contains(&mix.len()), "{}", mix.len());
        assert!(mix.iter().all(|r| (100..150).contains(&r.prompt)));
        assert!(mix.windows(2).all(|w| w[0].at <= w[1].at));
    }

    /// The two Azure logs shipped beside the project, read as the lab reads them.
    #[test]
    fn the_azure_logs_read_as_their_readme_says() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/data/azure-llm-inference-2023");
        for (file, count, rate) in [
            // One more each than the data's README says: its last line has no newline, so
            // `wc -l` less the header undercounts by one.
            ("AzureLLMInferenceTrace_conv.csv", 19_366, 5.5),
            ("AzureLLMInferenceTrace_code.csv", 8_819, 2.6),
        ] {
            let log = read(&dir.join(file)).unwrap();
            assert_eq!(log.requests.len(), count, "{file}");
            assert!((log.rate() - rate).abs() < 0.4, "{file}: {}", log.rate());
            assert!(
                log.span > 3000.0 && log.span < 3700.0,
                "{file}: {}",
                log.span
            );
        }
    }
}
