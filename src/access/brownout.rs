//! A brownout for a CRI version being retired (issue 38): calls in that version are refused
//! always, or for part of each period (say, 10 minutes of every hour, from the hour), so that the
//! teams whose agents still use it find them before the runtime stops serving it, as cloud
//! providers browned out old APIs before removing them.

use std::time::Duration;

/// When calls in one version are refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Brownout {
    Always,
    /// The first `refused` of every `every`, counted from the Unix epoch (so every node of a
    /// fleet browns out at the same moments).
    Schedule {
        every: Duration,
        refused: Duration,
    },
}

impl Brownout {
    /// Whether calls are refused at `now` (since the Unix epoch).
    pub fn active(&self, now: Duration) -> bool {
        match self {
            Brownout::Always => true,
            Brownout::Schedule { every, refused } => {
                let every = every.as_secs().max(1);
                now.as_secs() % every < refused.as_secs()
            }
        }
    }

    /// How the config says it: `deny`, or `10m of every 1h`.
    pub fn describe(&self) -> String {
        match self {
            Brownout::Always => "deny".to_string(),
            Brownout::Schedule { every, refused } => {
                format!("the first {} of every {}", duration_text(*refused), duration_text(*every))
            }
        }
    }
}

/// `90s`, `10m`, `1h`, `2d`: a whole number and a unit.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    number.checked_mul(seconds).map(Duration::from_secs)
}

fn duration_text(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_refuses_the_first_part_of_each_period() {
        let brownout = Brownout::Schedule { every: Duration::from_secs(3600), refused: Duration::from_secs(600) };
        assert!(brownout.active(Duration::from_secs(7200)), "on the hour");
        assert!(brownout.active(Duration::from_secs(7200 + 599)));
        assert!(!brownout.active(Duration::from_secs(7200 + 600)));
        assert!(!brownout.active(Duration::from_secs(7200 + 3599)));
        assert!(Brownout::Always.active(Duration::ZERO));
        assert_eq!(brownout.describe(), "the first 10m of every 1h");
    }

    #[test]
    fn durations_are_a_number_and_a_unit() {
        assert_eq!(parse_duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("45s"), Some(Duration::from_secs(45)));
        for bad in ["", "10", "m", "1.5h", "-1m", "10 minutes"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
