//! The scale-down step cap.

/// The replica count to write now on the way from `current` to `desired`: at most `max_step`
/// replicas fewer than `current` (0 = no limit). Scale-up and no-change pass through.
pub fn cap_scale_down(current: i32, desired: i32, max_step: i32) -> i32 {
    if desired >= current || max_step <= 0 {
        return desired;
    }
    desired.max(current.saturating_sub(max_step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_cap_table() {
        // (current, desired, cap) -> written
        for (current, desired, cap, want) in [
            (10, 1, 0, 1),
            (10, 1, 2, 8),
            (10, 9, 2, 9),
            (10, 8, 2, 8),
            (2, 10, 1, 10),
            (5, 5, 1, 5),
            (1, 0, 5, 0),
            (i32::MIN + 1, i32::MIN, 5, i32::MIN),
            (i32::MAX, 0, 1, i32::MAX - 1),
        ] {
            assert_eq!(
                cap_scale_down(current, desired, cap),
                want,
                "({current}, {desired}, {cap})"
            );
        }
    }

    #[test]
    fn walks_down_step_by_step() {
        let mut current = 10;
        let mut seen = vec![current];
        while current > 1 {
            current = cap_scale_down(current, 1, 2);
            seen.push(current);
        }
        assert_eq!(seen, [10, 8, 6, 4, 2, 1]);
    }
}
