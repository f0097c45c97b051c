//! A server-sent-events decoder that accepts the byte stream in arbitrary pieces.

/// Turns bytes into the `data` payloads of complete events. Lines may end in `\n` or `\r\n`;
/// comment lines (`:`) and fields other than `data` are ignored; several `data` lines of one
/// event are joined with `\n`.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes after the last complete line.
    partial: Vec<u8>,
    /// The data lines of the event being read.
    data: Option<String>,
}

impl SseDecoder {
    /// Feeds the next bytes; returns the data of every event they complete.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.partial.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut consumed = 0;
        while let Some(nl) = self.partial[consumed..].iter().position(|&b| b == b'\n') {
            let end = consumed + nl;
            let line = self.partial[consumed..end]
                .strip_suffix(b"\r")
                .unwrap_or(&self.partial[consumed..end]);
            // A line ends at `\n`, which never occurs inside a multi-byte UTF-8 sequence.
            let line = String::from_utf8_lossy(line).into_owned();
            consumed = end + 1;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.partial.drain(..consumed);
        events
    }

    /// The end of the stream: the last event when it lacked its closing blank line.
    pub(crate) fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.partial);
        if !rest.is_empty() {
            let line = String::from_utf8_lossy(rest.strip_suffix(b"\r").unwrap_or(&rest));
            if let Some(event) = self.line(&line) {
                return Some(event);
            }
        }
        self.data.take()
    }

    fn line(&mut self, line: &str) -> Option<String> {
        if line.is_empty() {
            return self.data.take();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &[u8], piece: usize) -> Vec<String> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for chunk in input.chunks(piece) {
            events.extend(decoder.push(chunk));
        }
        events.extend(decoder.finish());
        events
    }

    #[test]
    fn events_survive_any_split() {
        let input = "data: {\"a\":\"é🦀\"}\n\n: keep-alive\n\nevent: x\ndata: one\r\ndata: two\r\n\r\ndata:[DONE]\n\n";
        let want = vec!["{\"a\":\"é🦀\"}", "one\ntwo", "[DONE]"];
        for piece in 1..=input.len() {
            assert_eq!(
                decode_in_pieces(input.as_bytes(), piece),
                want,
                "piece {piece}"
            );
        }
    }

    #[test]
    fn an_unterminated_last_event_is_delivered_at_the_end() {
        assert_eq!(decode_in_pieces(b"data: last", 3), vec!["last"]);
        assert_eq!(decode_in_pieces(b"data: last\n", 3), vec!["last"]);
        assert!(decode_in_pieces(b": only a comment", 4).is_empty());
    }
}
