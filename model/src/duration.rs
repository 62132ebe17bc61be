//! Durations as written on command lines and in chart values: one parser
//! for every binary (`500ms`, `10s`, `5m`, `1h`, `30d`).

use std::time::Duration;

/// Parses `500ms`, `10s`, `5m`, `1h`, `30d`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse(text, true)
}

/// [`parse_duration`] that requires the unit: for values where a bare
/// number is more likely a mistake than seconds (certificate lifetimes).
pub fn parse_duration_with_unit(text: &str) -> Result<Duration, String> {
    parse(text, false)
}

fn parse(text: &str, bare_seconds: bool) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?} (e.g. 500ms, 90s, 10m, 720h, 30d)"))?;
    let seconds = |factor: u64| Duration::from_secs(n.saturating_mul(factor));
    Ok(match unit {
        "" if bare_seconds => seconds(1),
        "s" => seconds(1),
        "ms" => Duration::from_millis(n),
        "m" => seconds(60),
        "h" => seconds(3600),
        "d" => seconds(24 * 3600),
        _ => {
            return Err(format!(
                "invalid duration {text:?}: use the unit ms, s, m, h or d"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_grammar_for_every_flag() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86400)));
        assert_eq!(parse_duration_with_unit("90s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration_with_unit("10").is_err());
        assert!(parse_duration("1y").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-5s").is_err());
    }
}
