//! Stored chats: which chat a turn keeps, its history and title, and saving an answered turn.

use super::*;

/// The title of a new stored chat whose first user message has no text.
pub(crate) const UNTITLED: &str = "Untitled chat";

/// The longest title a caller may give a stored chat, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// Where a turn's messages are kept.
pub(crate) enum Keeping {
    /// Nowhere: the caller keeps the history (the stateless contract).
    Caller,
    /// In a new stored chat of the session, once the turn has answered.
    NewChat { chat_id: String, session_id: String, title: Option<String> },
    /// In this stored chat, saved from the revision read before the turn.
    Chat(ChatRow),
}

impl Keeping {
    /// The id of the stored chat the turn continues (a new chat has none until it is saved).
    pub(crate) fn stored_id(&self) -> Option<&str> {
        match self {
            Keeping::Caller | Keeping::NewChat { .. } => None,
            Keeping::Chat(chat) => Some(&chat.chat_id),
        }
    }
}

/// One turn as a stored chat records it: its tool calls, and where its messages start.
#[derive(Serialize)]
pub(crate) struct StoredTurn<'a> {
    /// 1 for the chat's first turn.
    pub(crate) turn: usize,
    /// The index in the chat's messages of the turn's first answer.
    pub(crate) message_index: usize,
    pub(crate) at: String,
    pub(crate) calls: &'a [ToolCall],
}

pub(crate) fn chat_not_found(chat_id: &str) -> ToolError {
    ToolError::new(ErrorCode::ChatNotFound, format!("Chat '{chat_id}' not found.")).with("chat_id", chat_id)
}

/// Decides from the arguments where the turn's messages are kept, reading the stored chat when
/// one is named (a chat of another session is not found: it is never revealed).
pub(crate) async fn keeping(ctx: &ToolContext, input: &Input) -> Result<Keeping, ToolError> {
    if input.new_chat && input.chat_id.is_some() {
        return Err(ToolError::invalid_parameter(
            "'new_chat' starts a stored chat and 'chat_id' continues one: give one of them.",
        )
        .with("parameter", "new_chat"));
    }
    if input.title.is_some() && !input.new_chat {
        return Err(ToolError::invalid_parameter("'title' names a new stored chat: give it with 'new_chat': true.")
            .with("parameter", "title"));
    }
    if let Some(chat_id) = &input.chat_id {
        if !input.messages.is_empty() {
            return Err(ToolError::invalid_parameter(
                "With 'chat_id' the stored chat is the history: send only the new user message, as 'prompt'.",
            )
            .with("parameter", "messages")
            .with("chat_id", chat_id.as_str()));
        }
        let chat = ctx
            .runtime
            .chats()
            .get(chat_id)
            .await?
            .filter(|chat| chat.session_id == input.session_id)
            .ok_or_else(|| chat_not_found(chat_id))?;
        if input.approval.is_none() && input.prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
            return Err(ToolError::new(
                ErrorCode::MissingParameter,
                "Missing required parameter: 'prompt' (the next user message of the chat).",
            )
            .with("parameter", "prompt")
            .with("chat_id", chat_id.as_str()));
        }
        return Ok(Keeping::Chat(chat));
    }
    if !input.new_chat {
        return Ok(Keeping::Caller);
    }
    let title = input.title.as_deref().map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "));
    if let Some(title) = &title
        && title.chars().count() > MAX_TITLE_CHARS
    {
        return Err(ToolError::invalid_parameter(format!(
            "'title' is {} characters long; at most {MAX_TITLE_CHARS} are kept.",
            title.chars().count()
        ))
        .with("parameter", "title"));
    }
    Ok(Keeping::NewChat {
        chat_id: cks_runtime::chats::new_chat_id(),
        session_id: input.session_id.clone(),
        title: title.filter(|t| !t.is_empty()),
    })
}

/// An `approval` for a conversation that waits for none.
pub(crate) fn no_pending_call() -> ToolError {
    ToolError::invalid_parameter(
        "'approval' decides a pending call, and this conversation has none: its last message is not a model's \
         answer with a call waiting for approval. Send a 'prompt' instead.",
    )
    .with("parameter", "approval")
}

/// The user message that continues a stored chat. When the chat waits for a decision on its last
/// answer's calls, the new message declines them first: every call gets its result, as every
/// provider requires, and the model learns that the user moved on.
pub(crate) fn new_message(stored: &[Value], prompt: String) -> Value {
    let open: Vec<String> = stored
        .last()
        .and_then(|m| serde_json::from_value::<Message>(m.clone()).ok())
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.tool_calls().iter().map(|c| c.id.to_owned()).collect())
        .unwrap_or_default();
    if open.is_empty() {
        return json!({"role": "user", "content": prompt});
    }
    let declined = ToolError::new(
        ErrorCode::NotApproved,
        "The user did not approve this call and sent a new message instead, so it did not run.",
    )
    .to_value()
    .to_string();
    let mut content: Vec<Value> = open
        .into_iter()
        .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": declined, "is_error": true}))
        .collect();
    content.push(json!({"type": "text", "text": prompt}));
    json!({"role": "user", "content": content})
}

/// What a finished turn leaves to keep.
pub(crate) struct Turn<'a> {
    /// The history the turn was run on (the caller's or the stored chat's, with the new message).
    pub(crate) history: &'a [Message],
    /// How many of `messages` came before the turn's first answer.
    pub(crate) answered_from: usize,
    pub(crate) messages: &'a [Value],
    pub(crate) tool_calls: &'a [ToolCall],
}

/// Saves a finished turn where `keeping` says, in one store write; the stored chat's id, or
/// `None` when the caller keeps the history. A chat saved by another turn since this one read it
/// is `chat_busy`, and nothing is written.
pub(crate) async fn save_turn(
    ctx: &ToolContext,
    keeping: &Keeping,
    turn: Turn<'_>,
) -> Result<Option<String>, ToolError> {
    let now = cks_runtime::chats::timestamp();
    let (row, expected_revision, turns) = match keeping {
        Keeping::Caller => return Ok(None),
        Keeping::NewChat { chat_id, session_id, title } => {
            let first = turn.history.iter().find(|m| m.role == Role::User).map(Message::text).unwrap_or_default();
            let made = cks_runtime::chats::title_from(&first);
            let title = match title {
                Some(given) => given.clone(),
                None if made.is_empty() => UNTITLED.to_owned(),
                None => made,
            };
            let row = ChatRow {
                chat_id: chat_id.clone(),
                session_id: session_id.clone(),
                title,
                created_at: now.clone(),
                ..ChatRow::default()
            };
            (row, None, Vec::new())
        }
        Keeping::Chat(chat) => {
            let turns: Vec<Value> = serde_json::from_str(&chat.tool_calls).map_err(|e| {
                ToolError::internal(format!("the stored tool calls of chat '{}' are unreadable: {e}", chat.chat_id))
            })?;
            (chat.clone(), Some(chat.revision), turns)
        }
    };
    let mut turns = turns;
    let record = StoredTurn {
        turn: turns.len() + 1,
        message_index: turn.answered_from,
        at: now.clone(),
        calls: turn.tool_calls,
    };
    turns.push(json!(record));
    let row = ChatRow {
        messages: Value::Array(turn.messages.to_vec()).to_string(),
        message_count: turn.messages.len() as u64,
        tool_calls: Value::Array(turns).to_string(),
        updated_at: now,
        ..row
    };
    if !ctx.runtime.chats().save(&row, expected_revision).await? {
        return Err(ToolError::new(
            ErrorCode::ChatBusy,
            format!(
                "Another turn of chat '{}' was saved while this one ran, so this turn is not stored (its tool \
                 calls did run). Read the chat again (get_chat) and send the prompt again if it is still needed.",
                row.chat_id
            ),
        ));
    }
    Ok(Some(row.chat_id))
}
