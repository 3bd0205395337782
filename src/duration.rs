//! Durations as users write them, on the command line and in server
//! addresses: `30s`, `5m`, `1h 30m`, or seconds with fractions (`2.5`), as
//! flock takes them.

use std::time::Duration;

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() {
            return Err(format!("'{s}' is not a duration"));
        }
        if secs < 0.0 {
            return Err(format!(
                "'{s}' is not a duration: a duration is not negative"
            ));
        }
        return Ok(Duration::from_secs_f64(secs));
    }
    if s.starts_with('-') {
        return Err(format!(
            "'{s}' is not a duration: a duration is not negative"
        ));
    }
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2.5").unwrap().as_millis(), 2500);
        assert_eq!(parse_duration("30s").unwrap().as_secs(), 30);
        assert_eq!(parse_duration("5m").unwrap().as_secs(), 300);
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn negative_durations_say_so() {
        for s in ["-1", "-2.5", "-5m"] {
            let e = parse_duration(s).unwrap_err();
            assert!(e.contains("a duration is not negative"), "{e}");
        }
    }
}
