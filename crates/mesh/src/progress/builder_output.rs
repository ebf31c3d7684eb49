//! The builder's own words, read once where a line arrives: its place in the Dockerfile.

/// The builder's place in the Dockerfile: the classic builder's `Step 3/5 : RUN …`, or BuildKit's
/// `#7 [2/4] RUN …` (`[stage 2/4]` in a multi-stage build). The builder's words, read once where
/// the line arrives; the step's payload carries the answer.
pub fn builder_step(line: &str) -> Option<(u32, u32)> {
    let fraction = |text: &str| -> Option<(u32, u32)> {
        let (n, m) = text.split_once('/')?;
        let (n, m) = (n.trim().parse().ok()?, m.trim().parse().ok()?);
        (n >= 1 && n <= m).then_some((n, m))
    };
    if let Some(rest) = line.trim_start().strip_prefix("Step ") {
        return fraction(rest.split(" :").next()?);
    }
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let inside = &line[open + 1..close];
    fraction(inside.rsplit(' ').next()?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn builder_steps_classic_and_buildkit() {
        assert_eq!(builder_step("Step 3/5 : RUN make"), Some((3, 5)));
        assert_eq!(builder_step("#7 [2/4] RUN make"), Some((2, 4)));
        assert_eq!(builder_step("#9 [build 3/6] COPY . ."), Some((3, 6)));
        assert_eq!(builder_step(" ---> Running in 997ef2f20ecc"), None);
        assert_eq!(builder_step("[0/0]"), None);
        assert_eq!(builder_step("Step x/5 : RUN"), None);
    }
}
