//! Stream framing: bytes to SSE events or NDJSON lines. The providers' decoders interpret the frames.
//!
//! Both parsers are incremental (chunks may split anywhere, even inside a UTF-8 sequence), accept LF and
//! CRLF line endings (Gemini sends CRLF), skip SSE comment lines (`: keep-alive`, OpenRouter) and flush a
//! final event that lacks its blank line.

/// How a provider frames its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-sent events (Anthropic, OpenAI, Gemini `alt=sse`).
    Sse,
    /// Newline-delimited JSON (Ollama).
    Ndjson,
}

/// One unit of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// An SSE event: its `event:` name (if any) and its `data:` lines joined by `\n`.
    Event { name: Option<String>, data: String },
    /// One NDJSON line (never empty).
    Line(String),
}

/// Splits a byte stream into frames.
#[derive(Debug)]
pub(crate) struct Framer {
    framing: Framing,
    buf: Vec<u8>,
    name: Option<String>,
    data: Vec<String>,
}

impl Framer {
    pub(crate) fn new(framing: Framing) -> Self {
        Framer { framing, buf: Vec::new(), name: None, data: Vec::new() }
    }

    /// Feed bytes; returns the frames completed by them.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Frame>, String> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).map_err(|_| "stream line is not valid UTF-8".to_owned())?;
            self.line(line, &mut out);
        }
        Ok(out)
    }

    /// End of stream: flush what is pending.
    ///
    /// A final line without its newline is a cut-off line (the connection dropped mid-write): it is dropped,
    /// so the provider's decoder sees no end marker and reports a truncated stream, which is retried, rather
    /// than a JSON error, which would not be. Complete `data:` lines of an event that lacks only its closing
    /// blank line are still delivered (some servers end that way).
    pub(crate) fn finish(&mut self) -> Result<Vec<Frame>, String> {
        let mut out = Vec::new();
        self.buf.clear();
        if self.framing == Framing::Sse {
            self.dispatch(&mut out);
        }
        Ok(out)
    }

    fn line(&mut self, line: String, out: &mut Vec<Frame>) {
        match self.framing {
            Framing::Ndjson => {
                if !line.trim().is_empty() {
                    out.push(Frame::Line(line));
                }
            }
            Framing::Sse => {
                if line.is_empty() {
                    self.dispatch(out);
                } else if line.starts_with(':') {
                    // Comment / keep-alive.
                } else {
                    let (field, value) = match line.split_once(':') {
                        Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                        None => (line.as_str(), ""),
                    };
                    match field {
                        "event" => self.name = Some(value.to_owned()),
                        "data" => self.data.push(value.to_owned()),
                        _ => {} // `id`, `retry`: not used by any provider we speak.
                    }
                }
            }
        }
    }

    fn dispatch(&mut self, out: &mut Vec<Frame>) {
        let name = self.name.take();
        if self.data.is_empty() {
            return;
        }
        let data = std::mem::take(&mut self.data).join("\n");
        out.push(Frame::Event { name, data });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_split_anywhere_with_crlf_comments_and_no_final_blank_line() {
        let text = ": keep-alive\r\nevent: a\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\ndata: é\n\ndata: last\ndata: {\"cut";
        let bytes = text.as_bytes();
        for split in 0..bytes.len() {
            let mut f = Framer::new(Framing::Sse);
            let mut frames = f.push(&bytes[..split]).unwrap();
            frames.extend(f.push(&bytes[split..]).unwrap());
            frames.extend(f.finish().unwrap());
            assert_eq!(
                frames,
                vec![
                    Frame::Event { name: Some("a".into()), data: "{\"x\":\n1}".into() },
                    Frame::Event { name: None, data: "é".into() },
                    Frame::Event { name: None, data: "last".into() },
                ]
            );
        }
    }

    #[test]
    fn ndjson_lines() {
        let mut f = Framer::new(Framing::Ndjson);
        let mut frames = f.push(b"{\"a\":1}\n\n{\"b\"").unwrap();
        frames.extend(f.push(b":2}\n{\"cut").unwrap());
        frames.extend(f.finish().unwrap());
        assert_eq!(frames, vec![Frame::Line("{\"a\":1}".into()), Frame::Line("{\"b\":2}".into())]);
    }
}
