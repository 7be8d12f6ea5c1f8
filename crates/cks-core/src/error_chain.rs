//! An error as people read it: the error and its causes on one line ("error connecting to
//! server: Connection refused (os error 111)"). Library errors' top-level messages alone rarely
//! say what failed.

/// The error and each cause whose text it does not already contain, joined with `": "`.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::error_chain;
    use std::fmt;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn causes_are_joined_and_repeats_left_out() {
        let e = Layer("connect failed", Some(Box::new(Layer("refused", Some(Box::new(Layer("refused", None)))))));
        assert_eq!(error_chain(&e), "connect failed: refused");
        let repeated = Layer("timed out: deadline", Some(Box::new(Layer("deadline", None))));
        assert_eq!(error_chain(&repeated), "timed out: deadline");
    }
}
