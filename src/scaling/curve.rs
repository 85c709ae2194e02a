//! The load–latency curve: how the share of a pod's requests that come close to the objective's
//! budgets rises with the load it carries, fitted over the last hour, and the load where it
//! would make the objective miss.
//!
//! The rules of [`super::capacity`] see a window as a pass or a miss. A miss takes 1% of the
//! requests (at 99%) and arrives late: each probe up is paid for in missed requests before it is
//! undone. Far more requests come *close* to a budget than miss it — above the histogram bucket
//! just below it (a queue longer than 0.8 s of a 1 s budget, tokens slower than 75 ms of 100):
//! measured in the lab on steady chat traffic, that share grows from 3% at 3 requests per pod to
//! 15% at 5 and 61% at 8, smoothly enough that its logit is close to a line in the load. Every
//! window, missed or not, adds a point to it. Fitted by weighted least squares, with the pooled
//! share of those close requests that then missed, it tells where the late share reaches the
//! allowance before the pods get there.
//!
//! The curve only ever caps: an estimate above what it says comes down, a little per sync
//! ([`cap`]); it never raises one. The pooled share is taken as measured, not at an upper
//! confidence bound: with few late requests it is noisy, and a low one only weakens the cap.
//! Measured in the lab (8 seeds, L4, against the rules alone): goodput on the synthetic code
//! shape 88.4% → 94.5% at 300 s start-up and 93.9% → 94.9% at 180 s, on the Azure conversation
//! log at 300 s 98.9% → 99.0%, for 0–4% more GPU-hours on chat-like traffic (10% on burstgpt at
//! 90 s); on the real code log, where more than half of the close requests also miss, it stays
//! silent. Taking the share at its upper bound cost 5–20% more on chat traffic for nothing the
//! objective needed; letting the curve raise the estimate too saved 2–7% there but cost
//! attainment on bursty traffic; reading it without the early-warning test below held a
//! control-plane fleet whose late share jumps from 0 to 30% at its capacity a third above
//! the size it needed (the logit's line through a jump is shallow).
//!
//! Each bin also keeps how long its requests ran (by Little's law, the requests one pod ran
//! over those it admitted a second): a line of that duration on the load tells how much longer a
//! request runs once a step down has filled the pods, which sizes a scale-down after a miss
//! ([`LoadCurve::duration_ratio`]). That line is read only where its slope stands out of the
//! scatter of its points: durations flat but noisy tilt a fitted line one way or the other, and
//! on a control-plane fleet whose requests ran as long at any load the tilt, read as a rise,
//! rested the fleet a pod away from where the fixed spare puts it.
//!
//! It lives in the operator's process, not in status (it changes at every sync): a restart
//! starts it afresh, which leaves the estimate uncapped until it has points again.

use k8s_openapi::jiff::Timestamp;

/// Seconds over which a point's weight falls by e: the curve describes the last hour's pods.
const MEMORY_SECONDS: f64 = 3600.0;
/// Width of a load bin, as a ratio of its upper to its lower bound.
const BIN_RATIO: f64 = 1.0625;
/// The lowest load binned on its own: lighter loads share the first bin.
const BIN_FLOOR: f64 = 0.25;
/// The last bin (≈ 256 requests per pod, the estimate's ceiling).
const LAST_BIN: u16 = 114;
/// A bin with fewer requests (by weight) is left out of the fit, and a bin whose weight has
/// decayed below `FORGOTTEN` is dropped.
const MIN_BIN_REQUESTS: f64 = 5.0;
const FORGOTTEN: f64 = 0.05;
/// The fit needs this many bins and this many close requests: fewer say nothing of a slope.
const MIN_BINS: usize = 3;
const MIN_WARNED: f64 = 20.0;
/// The curve is read only when at most this share of the close requests then missed: its
/// premise is that requests come close to a budget well before they miss it. In the lab 1–4% of
/// the close ones miss on chat traffic and 12–19% on the synthetic code shape, but 56–83% on
/// the real code log: there the histograms give no early warning, and the curve says nothing.
const MAX_LATE_PER_CLOSE: f64 = 0.5;
/// The curve's capacity is extrapolated at most this far past the highest load it has seen.
const REACH: f64 = 1.5;
/// The highest share of close requests the capacity is solved for: above it, the logit's line
/// is not to be trusted.
const MAX_WARNED_SHARE: f64 = 0.95;

/// The most the cap lowers the estimate by in one sync, as a factor: the curve moves with the
/// traffic's mix, and a cap that jumped would chase it.
pub const CAP_MAX_FALL: f64 = 0.95;

/// One load bin's requests, by weight.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bin {
    index: u16,
    requests: f32,
    /// Requests above the bucket bound below a budget.
    warned: f32,
    /// Requests above a budget.
    late: f32,
    /// Σ load × requests: the bin's mean load is the fit's abscissa.
    load: f32,
    /// Σ duration × requests and the requests it was known for.
    duration: f32,
    timed: f32,
}

/// The curve: the windows' requests binned by the load they were served at, with their weight
/// decaying over [`MEMORY_SECONDS`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadCurve {
    bins: Vec<Bin>,
    /// The last window added.
    at: Option<Timestamp>,
}

/// One window: the load one Ready pod carried and its requests' shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub load: f64,
    pub requests: f64,
    /// Share of the requests above the bucket bound below a budget.
    pub warned: f64,
    /// Share of the requests above a budget.
    pub late: f64,
    /// Seconds a request ran on average over the window (Little's law: the requests running
    /// per pod over the requests one pod admitted a second); NaN when unknown.
    pub duration: f64,
}

fn bin_of(load: f64) -> u16 {
    if load <= BIN_FLOOR {
        return 0;
    }
    let index = ((load / BIN_FLOOR).ln() / BIN_RATIO.ln()).floor() + 1.0;
    if index >= f64::from(LAST_BIN) {
        LAST_BIN
    } else {
        index as u16
    }
}

impl LoadCurve {
    /// The curve at `now` with `point` added, if there is one (a sync without a usable window
    /// only ages it). Windows of `window_seconds` read at shorter intervals overlap, so a window
    /// counts for the share of it not counted before.
    pub fn add(&self, point: Option<Point>, now: Timestamp, window_seconds: f64) -> Self {
        let elapsed = self
            .at
            .map(|at| now.duration_since(at).as_secs_f64().max(0.0));
        let decay = elapsed.map_or(1.0, |e| (-e / MEMORY_SECONDS).exp());
        let mut bins: Vec<Bin> = self
            .bins
            .iter()
            .map(|b| Bin {
                requests: (f64::from(b.requests) * decay) as f32,
                warned: (f64::from(b.warned) * decay) as f32,
                late: (f64::from(b.late) * decay) as f32,
                load: (f64::from(b.load) * decay) as f32,
                duration: (f64::from(b.duration) * decay) as f32,
                timed: (f64::from(b.timed) * decay) as f32,
                ..*b
            })
            .filter(|b| f64::from(b.requests) >= FORGOTTEN)
            .collect();
        let usable = point.filter(|p| {
            p.load.is_finite()
                && p.load >= 0.0
                && p.requests.is_finite()
                && p.requests > 0.0
                && (0.0..=1.0).contains(&p.warned)
                && (0.0..=1.0).contains(&p.late)
        });
        let mut at = self.at;
        if let Some(p) = usable {
            let share = elapsed.map_or(1.0, |e| (e / window_seconds).clamp(0.0, 1.0));
            let requests = p.requests * share;
            let index = bin_of(p.load);
            let position = bins.binary_search_by_key(&index, |b| b.index);
            let bin = match position {
                Ok(i) => &mut bins[i],
                Err(i) => {
                    bins.insert(
                        i,
                        Bin {
                            index,
                            requests: 0.0,
                            warned: 0.0,
                            late: 0.0,
                            load: 0.0,
                            duration: 0.0,
                            timed: 0.0,
                        },
                    );
                    &mut bins[i]
                }
            };
            bin.requests += requests as f32;
            // A request that missed came close first, whatever the buckets say.
            bin.warned += (requests * p.warned.max(p.late)) as f32;
            bin.late += (requests * p.late) as f32;
            bin.load += (requests * p.load) as f32;
            if p.duration.is_finite() && p.duration > 0.0 {
                bin.duration += (requests * p.duration) as f32;
                bin.timed += requests as f32;
            }
            at = Some(now);
        } else if at.is_some() {
            at = Some(now);
        }
        Self { bins, at }
    }

    /// The load one pod carries when the share of late requests reaches `allowed`, if the
    /// curve has enough points to say (none without a rising curve).
    pub fn capacity(&self, allowed: f64) -> Option<f64> {
        if !(0.0..1.0).contains(&allowed) || allowed == 0.0 {
            return None;
        }
        let warned: f64 = self.bins.iter().map(|b| f64::from(b.warned)).sum();
        let late: f64 = self.bins.iter().map(|b| f64::from(b.late)).sum();
        if warned < MIN_WARNED {
            return None;
        }
        // The pooled share of close requests that then missed, taken as measured: with few late
        // requests it is noisy, and a low one only weakens a cap that never raises.
        let late_per_warned = (late / warned).min(1.0);
        if late_per_warned > MAX_LATE_PER_CLOSE {
            return None;
        }
        let target = if late_per_warned > 0.0 {
            (allowed / late_per_warned).min(MAX_WARNED_SHARE)
        } else {
            MAX_WARNED_SHARE
        };
        // The highest load the objective was seen held at, over enough requests for the
        // allowance to expect one late one: the fit never says less than what was measured. A
        // curve that is not a logistic (a late share that jumps and then stays flat) would
        // otherwise extrapolate far below it.
        let held = self
            .bins
            .iter()
            .map(|b| (f64::from(b.requests), f64::from(b.late), f64::from(b.load)))
            .filter(|(n, late, _)| n * allowed >= 1.0 && *late <= allowed * n)
            .map(|(n, _, load)| load / n)
            .fold(0.0, f64::max);
        // The logit of the close share on the load, each bin weighted by the inverse of its
        // logit's variance.
        let line = rising_line(self.bins.iter().filter_map(|b| {
            let n = f64::from(b.requests);
            if n < MIN_BIN_REQUESTS {
                return None;
            }
            let p = ((f64::from(b.warned) + 0.5) / (n + 1.0)).clamp(1e-4, 1.0 - 1e-4);
            Some((
                n * p * (1.0 - p),
                f64::from(b.load) / n,
                (p / (1.0 - p)).ln(),
            ))
        }))?;
        let at = ((target / (1.0 - target)).ln() - line.intercept) / line.slope;
        at.is_finite()
            .then(|| at.min(line.highest * REACH).max(held))
    }

    /// How many times longer a request runs at `to` requests per pod than at `from`: the ratio
    /// of a line of the mean duration on the load (least squares over the bins, each weighted by
    /// its timed requests), if the curve has enough timed bins and the line rises by more than its
    /// points scatter (a flat line that noise tilts says nothing). Like the
    /// capacity, the line is read at most [`REACH`] times past the highest load it has seen.
    pub fn duration_ratio(&self, from: f64, to: f64) -> Option<f64> {
        let line = rising_line(self.bins.iter().filter_map(|b| {
            let n = f64::from(b.timed);
            (n >= MIN_BIN_REQUESTS).then(|| {
                let load = f64::from(b.load) / f64::from(b.requests);
                (n, load, f64::from(b.duration) / n)
            })
        }))
        .filter(Line::rises_beyond_noise)?;
        let reach = line.highest * REACH;
        let at = |load: f64| line.intercept + line.slope * load.min(reach);
        // A line through steep points may cross zero below them: no duration is negative.
        let ratio = at(to) / at(from);
        (at(from) > 0.0 && at(to) > 0.0 && ratio.is_finite()).then_some(ratio)
    }
}

/// A line fitted by weighted least squares, the standard error of its slope (from the
/// residuals about it) and the highest abscissa it was fitted on.
struct Line {
    slope: f64,
    slope_error: f64,
    /// The points' count less the line's two parameters.
    freedom: usize,
    intercept: f64,
    highest: f64,
}

impl Line {
    /// Whether the slope is told apart from a flat line: more than the two-sided 95% quantile of
    /// Student's t at the line's degrees of freedom times its standard error. Noise about a flat
    /// line tilts its fit one way or the other; a line read on it would size a fleet on noise.
    fn rises_beyond_noise(&self) -> bool {
        // The two-sided 95% quantiles of Student's t for 1 to 10 degrees of freedom; with more,
        // the tenth's (a little above the normal's 1.96) is kept.
        const T_975: [f64; 10] = [
            12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        ];
        let t = T_975[self.freedom.clamp(1, T_975.len()) - 1];
        self.slope > t * self.slope_error
    }
}

/// The line through `(weight, x, y)` points, if there are at least [`MIN_BINS`] of them and it
/// rises. The weights are the inverses of the points' variances up to one common factor, which
/// the residuals estimate for the slope's error.
fn rising_line(points: impl Iterator<Item = (f64, f64, f64)>) -> Option<Line> {
    let points: Vec<(f64, f64, f64)> = points.collect();
    if points.len() < MIN_BINS {
        return None;
    }
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut highest: f64 = 0.0;
    for &(w, x, y) in &points {
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
        highest = highest.max(x);
    }
    let det = sw * sxx - sx * sx;
    if det.is_nan() || det <= 0.0 {
        return None;
    }
    let slope = (sw * sxy - sx * sy) / det;
    if slope.is_nan() || slope <= 0.0 {
        return None;
    }
    let intercept = (sy - slope * sx) / sw;
    let freedom = points.len() - 2;
    let residual: f64 = points
        .iter()
        .map(|&(w, x, y)| w * (y - intercept - slope * x).powi(2))
        .sum::<f64>()
        / freedom as f64;
    Some(Line {
        slope,
        slope_error: (residual * sw / det).sqrt(),
        freedom,
        intercept,
        highest,
    })
}

/// The estimate `per_pod` capped by the curve's `capacity` (the load where the objective would
/// miss): brought down toward it by at most [`CAP_MAX_FALL`] per sync, never raised, never below
/// `floor`. `None` when the cap does not bite.
pub fn cap(per_pod: f64, capacity: f64, floor: f64) -> Option<f64> {
    if capacity.is_nan() || capacity >= per_pod {
        return None;
    }
    let to = capacity.max(per_pod * CAP_MAX_FALL).max(floor);
    (to < per_pod).then_some(to)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::scaling::fixture::t;

    fn logistic(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// Windows every 15 s over `minutes`, at loads cycling through `loads`, with a close share
    /// of logistic(slope × (load − middle)) and `late_per_warned` of those late.
    fn fed(
        loads: &[f64],
        minutes: i64,
        slope: f64,
        middle: f64,
        late_per_warned: f64,
    ) -> LoadCurve {
        let mut curve = LoadCurve::default();
        for i in 0..minutes * 4 {
            let load = loads[i as usize % loads.len()];
            let warned = logistic(slope * (load - middle));
            curve = curve.add(
                Some(Point {
                    load,
                    requests: 200.0,
                    warned,
                    late: warned * late_per_warned,
                    duration: f64::NAN,
                }),
                t(15 * i),
                60.0,
            );
        }
        curve
    }

    #[test]
    fn the_capacity_is_where_the_fitted_curve_makes_the_allowance() {
        // Close share 50% at 8 requests per pod, a quarter of the close requests late: at 1%
        // allowed, the capacity is where 4% come close, 8 − ln(24)/1.2 ≈ 5.35 per pod.
        let curve = fed(&[3.0, 4.0, 5.0, 6.0, 7.0], 30, 1.2, 8.0, 0.25);
        let truth = 8.0 - (0.04f64 / 0.96).ln().abs() / 1.2;
        let at = curve.capacity(0.01).unwrap();
        assert!((at - truth).abs() < 0.1, "{at} against {truth}");
    }

    #[test]
    fn a_curve_seen_only_far_below_its_capacity_is_extrapolated_only_so_far() {
        let curve = fed(&[1.0, 1.25, 1.5], 60, 1.2, 8.0, 0.25);
        if let Some(at) = curve.capacity(0.01) {
            assert!(at <= 1.5 * REACH + 0.01, "{at}");
        }
    }

    #[test]
    fn the_curve_never_puts_the_capacity_below_a_load_the_objective_held_at() {
        // Nothing close up to 4 per pod, then 30% close (10% late) at once and no higher: the
        // line through the logits is shallow and crosses the allowance far below 4.
        let mut curve = LoadCurve::default();
        for i in 0..240 {
            let load = [3.0, 3.43, 4.0, 4.8, 6.0, 12.0][i % 6];
            let share = if load > 4.0 { 0.3 } else { 0.0 };
            let point = Point {
                load,
                requests: 600.0,
                warned: share,
                late: share / 3.0,
                duration: f64::NAN,
            };
            curve = curve.add(Some(point), t(5 * i as i64), 60.0);
        }
        let at = curve.capacity(0.01).unwrap();
        assert!((4.0..4.8).contains(&at), "{at}");
    }

    /// Windows at `loads` in turn, each request running `duration(load)` seconds.
    fn timed(loads: &[f64], duration: impl Fn(f64) -> f64) -> LoadCurve {
        let mut curve = LoadCurve::default();
        for i in 0..120 {
            let load = loads[i % loads.len()];
            let point = Point {
                load,
                requests: 300.0,
                warned: 0.0,
                late: 0.0,
                duration: duration(load),
            };
            curve = curve.add(Some(point), t(15 * i as i64), 60.0);
        }
        curve
    }

    #[test]
    fn the_duration_ratio_reads_a_line_of_request_durations_on_the_load() {
        // Two seconds, and half a second more per request a pod runs: 4 s at 4 per pod, 5 s at 6.
        let curve = timed(&[2.0, 3.0, 4.0, 5.0, 6.0], |load| 2.0 + 0.5 * load);
        let ratio = curve.duration_ratio(4.0, 6.0).unwrap();
        assert!((ratio - 1.25).abs() < 1e-3, "{ratio}");
        // Read no further than 1.5 × the highest load seen (6): at 9, 6.5 s.
        let far = curve.duration_ratio(4.0, 100.0).unwrap();
        assert!((far - 6.5 / 4.0).abs() < 1e-3, "{far}");
    }

    #[test]
    fn durations_unknown_flat_or_on_too_few_loads_say_nothing() {
        let loads = [2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(timed(&loads, |_| f64::NAN).duration_ratio(4.0, 6.0), None);
        assert_eq!(timed(&loads, |_| 3.0).duration_ratio(4.0, 6.0), None);
        assert_eq!(
            timed(&loads, |load| 8.0 - load).duration_ratio(4.0, 6.0),
            None
        );
        let two = timed(&[2.0, 4.0], |load| 2.0 + 0.5 * load);
        assert_eq!(two.duration_ratio(4.0, 6.0), None);
    }

    #[test]
    fn durations_scattered_about_a_flat_line_say_nothing() {
        // About 3 s at every load, the scatter tilting the fitted line up (0.03 s per request):
        // read on it, a scale-down would keep pods for a lengthening that is not there.
        let scattered = |load: f64| match load as u8 {
            2 => 3.0,
            3 => 3.3,
            4 => 2.8,
            5 => 3.4,
            _ => 3.1,
        };
        let curve = timed(&[2.0, 3.0, 4.0, 5.0, 6.0], scattered);
        assert_eq!(curve.duration_ratio(4.0, 6.0), None);
        // The same scatter about a line that rises by half a second per request is read.
        let rising = timed(&[2.0, 3.0, 4.0, 5.0, 6.0], |load| {
            scattered(load) + 0.5 * load
        });
        let ratio = rising.duration_ratio(4.0, 6.0).unwrap();
        assert!((1.15..1.35).contains(&ratio), "{ratio}");
    }

    #[test]
    fn a_curve_without_early_warnings_says_nothing() {
        // Every close request is late: the histograms warn of nothing before a miss.
        assert_eq!(
            fed(&[3.0, 4.0, 5.0, 6.0, 7.0], 30, 1.2, 8.0, 1.0).capacity(0.01),
            None
        );
        assert_eq!(
            fed(&[3.0, 4.0, 5.0, 6.0, 7.0], 30, 1.2, 8.0, 0.6).capacity(0.01),
            None
        );
        assert!(
            fed(&[3.0, 4.0, 5.0, 6.0, 7.0], 30, 1.2, 8.0, 0.4)
                .capacity(0.01)
                .is_some()
        );
    }

    #[test]
    fn too_few_points_or_a_flat_curve_say_nothing() {
        assert_eq!(LoadCurve::default().capacity(0.01), None);
        // One load only: no slope.
        assert_eq!(fed(&[4.0], 30, 1.2, 8.0, 0.25).capacity(0.01), None);
        // A curve that falls with the load is not a capacity.
        assert_eq!(
            fed(&[3.0, 4.0, 5.0, 6.0], 30, -1.2, 8.0, 0.25).capacity(0.01),
            None
        );
        // No objective to solve for.
        let curve = fed(&[3.0, 4.0, 5.0, 6.0, 7.0], 30, 1.2, 8.0, 0.25);
        assert_eq!(curve.capacity(0.0), None);
    }

    #[test]
    fn old_windows_fade_and_a_sync_without_one_only_ages_the_curve() {
        let curve = fed(&[3.0, 4.0, 5.0, 6.0, 7.0], 30, 1.2, 8.0, 0.25);
        assert!(curve.capacity(0.01).is_some());
        let later = curve.add(None, t(15 * 120 + 10 * 3600), 60.0);
        assert_eq!(later.capacity(0.01), None);
        assert!(later.bins.is_empty());
    }

    #[test]
    fn overlapping_windows_count_each_request_about_once() {
        // Windows of a minute with 200 requests, read every 15 s for 10 minutes: the first counts
        // whole, each later one for the quarter it adds, every one faded by its age.
        let curve = fed(&[4.0], 10, 1.2, 8.0, 0.25);
        let last = 39.0 * 15.0;
        let expected: f64 = (0..40)
            .map(|i| {
                let weight = if i == 0 { 200.0 } else { 50.0 };
                weight * (-(last - 15.0 * f64::from(i)) / MEMORY_SECONDS).exp()
            })
            .sum();
        let total: f64 = curve.bins.iter().map(|b| f64::from(b.requests)).sum();
        assert!(
            (total - expected).abs() < 0.01 * expected,
            "{total} against {expected}"
        );
    }

    #[test]
    fn the_cap_only_lowers_and_by_a_bounded_step() {
        assert_eq!(cap(4.0, 10.0, 0.25), None);
        assert_eq!(cap(4.0, 4.0, 0.25), None);
        assert_eq!(cap(8.0, 7.0, 0.25), Some(8.0 * 0.95));
        assert_eq!(cap(8.0, 7.9, 0.25), Some(7.9));
        assert_eq!(cap(0.26, 0.0, 0.25), Some(0.25));
        assert_eq!(cap(0.25, 0.0, 0.25), None);
        assert_eq!(cap(8.0, f64::NAN, 0.25), None);
    }

    proptest! {
        #[test]
        fn the_cap_never_raises_and_never_falls_below_the_floor_or_its_step(
            per_pod in 0.25f64..256.0,
            capacity in 0.0f64..400.0,
        ) {
            if let Some(to) = cap(per_pod, capacity, 0.25) {
                prop_assert!(to < per_pod);
                prop_assert!(to >= 0.25);
                prop_assert!(to >= per_pod * CAP_MAX_FALL - 1e-9);
                prop_assert!(to >= capacity.min(per_pod));
            }
        }

        #[test]
        fn any_windows_make_a_finite_capacity_or_none(
            windows in proptest::collection::vec(
                (0.0f64..300.0, 0.0f64..500.0, 0.0f64..1.0, 0.0f64..1.0, 1i64..120, -1.0f64..600.0),
                0..80,
            ),
            from in 0.0f64..300.0,
            to in 0.0f64..300.0,
        ) {
            let mut curve = LoadCurve::default();
            let mut at = 0;
            for (load, requests, warned, late, gap, duration) in windows {
                at += gap;
                curve = curve.add(Some(Point { load, requests, warned, late, duration }), t(at), 60.0);
                prop_assert!(curve.bins.windows(2).all(|w| w[0].index < w[1].index));
                if let Some(c) = curve.capacity(0.01) {
                    prop_assert!(c.is_finite() && (0.0..=300.0 * REACH).contains(&c));
                }
                // The durations' line rises: a request never runs shorter at a higher load.
                if let Some(ratio) = curve.duration_ratio(from, to) {
                    prop_assert!(ratio.is_finite() && ratio > 0.0);
                    prop_assert!((ratio >= 1.0 - 1e-9) == (to >= from) || (ratio - 1.0).abs() < 1e-9);
                }
            }
        }
    }
}
