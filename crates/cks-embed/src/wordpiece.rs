//! BERT's uncased WordPiece tokenizer: the basic pass (control characters dropped, CJK
//! characters and punctuation split off, lowercase, accents stripped), then greedy
//! longest-match-first pieces from the vocabulary, continuations marked `##`.

use std::collections::HashMap;

use unicode_general_category::{GeneralCategory, get_general_category};
use unicode_normalization::UnicodeNormalization;

/// Words longer than this (in characters) are one unknown token, as in BERT.
const MAX_WORD_CHARS: usize = 100;

/// A WordPiece vocabulary: token → id.
#[derive(Debug, Clone)]
pub struct WordPiece {
    ids: HashMap<String, u32>,
    unknown: Option<u32>,
}

impl WordPiece {
    /// A vocabulary from `vocab.txt`'s form: one token per line, its id its line number.
    pub fn from_lines(text: &str) -> WordPiece {
        let ids: HashMap<String, u32> = text.lines().enumerate().map(|(i, t)| (t.to_owned(), i as u32)).collect();
        let unknown = ids.get("[UNK]").copied();
        WordPiece { ids, unknown }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The ids of `text`'s pieces, unknown words left out (they carry no meaning a table knows).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        for word in basic_tokens(text) {
            self.pieces(&word, &mut ids);
        }
        ids
    }

    /// The ids of `text`'s pieces as BERT gives them to its model: a word without pieces is one
    /// unknown token (nothing, when the vocabulary has none).
    pub fn tokens(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        for word in basic_tokens(text) {
            if !self.pieces(&word, &mut ids) {
                ids.extend(self.unknown);
            }
        }
        ids
    }

    /// The id of `token`, when the vocabulary has it.
    pub fn id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// Greedy longest-match-first pieces of one word; nothing, and false, when some part has no
    /// piece.
    fn pieces(&self, word: &str, out: &mut Vec<u32>) -> bool {
        let chars: Vec<(usize, char)> = word.char_indices().collect();
        if chars.len() > MAX_WORD_CHARS {
            return false;
        }
        let mut found = Vec::new();
        let mut start = 0;
        let mut piece = String::new();
        while start < chars.len() {
            let mut end = chars.len();
            let mut matched = None;
            while end > start {
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                let to = chars.get(end).map_or(word.len(), |(at, _)| *at);
                piece.push_str(&word[chars[start].0..to]);
                if let Some(id) = self.ids.get(piece.as_str()) {
                    matched = Some(*id);
                    break;
                }
                end -= 1;
            }
            match matched {
                Some(id) => found.push(id),
                None => return false,
            }
            start = end;
        }
        out.extend(found);
        true
    }

    /// The id of the unknown token, when the vocabulary has one.
    pub fn unknown(&self) -> Option<u32> {
        self.unknown
    }
}

/// The basic pass: words and single punctuation marks, lowercase, accents stripped.
fn basic_tokens(text: &str) -> Vec<String> {
    let mut spaced = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\0' || c == '\u{fffd}' || (c.is_control() && !c.is_whitespace()) {
            continue;
        }
        if is_cjk(c) {
            spaced.push(' ');
            spaced.push(c);
            spaced.push(' ');
        } else {
            spaced.push(if c.is_whitespace() { ' ' } else { c });
        }
    }
    let mut words = Vec::new();
    for word in spaced.split(' ').filter(|w| !w.is_empty()) {
        let plain: String =
            word.to_lowercase().nfd().filter(|c| get_general_category(*c) != GeneralCategory::NonspacingMark).collect();
        let mut current = String::new();
        for c in plain.chars() {
            if is_punctuation(c) {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
                words.push(c.to_string());
            } else {
                current.push(c);
            }
        }
        if !current.is_empty() {
            words.push(current);
        }
    }
    words
}

/// BERT's rule: every non-alphanumeric ASCII mark, and whatever Unicode calls punctuation.
fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    use GeneralCategory::*;
    matches!(
        get_general_category(c),
        ConnectorPunctuation
            | DashPunctuation
            | OpenPunctuation
            | ClosePunctuation
            | InitialPunctuation
            | FinalPunctuation
            | OtherPunctuation
    )
}

/// The CJK Unified Ideographs blocks, as BERT lists them.
fn is_cjk(c: char) -> bool {
    matches!(u32::from(c),
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> WordPiece {
        WordPiece::from_lines(
            ["[PAD]", "[UNK]", "the", "un", "##aff", "##able", "cafe", ",", "!", "run", "##ning", "中", "hello"]
                .join("\n")
                .as_str(),
        )
    }

    fn pieces(text: &str) -> Vec<u32> {
        vocab().encode(text)
    }

    #[test]
    fn words_split_into_the_longest_pieces() {
        assert_eq!(pieces("unaffable"), vec![3, 4, 5]);
        assert_eq!(pieces("Running"), vec![9, 10]);
    }

    #[test]
    fn case_accents_punctuation_and_cjk_are_handled_like_bert() {
        assert_eq!(pieces("Café, HELLO!"), vec![6, 7, 12, 8]);
        assert_eq!(pieces("hello中hello"), vec![12, 11, 12]);
        assert_eq!(pieces("the\u{0}\tthe\u{7}"), vec![2, 2]);
    }

    #[test]
    fn words_without_pieces_are_left_out() {
        assert_eq!(pieces("zebra the"), vec![2]);
        assert_eq!(pieces(&"a".repeat(101)), Vec::<u32>::new());
        assert_eq!(vocab().unknown(), Some(1));
    }

    #[test]
    fn a_model_sees_a_word_without_pieces_as_unknown() {
        assert_eq!(vocab().tokens("zebra the"), vec![1, 2]);
        assert_eq!(vocab().tokens(&format!("{} the!", "a".repeat(101))), vec![1, 2, 8]);
        assert_eq!(vocab().id("hello"), Some(12));
    }
}
