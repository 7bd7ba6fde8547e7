//! The SQS queue interruption events arrive on: long-poll receive, parse each body with
//! [`parse_interruption_message`], delete by receipt handle. The interruption controller decides what to do with
//! each message; a message, understood or not, is deleted once handled, so a malformed one is not received
//! again and again (one whose handling failed is left for SQS to deliver again: see the source).
//!
//! The queue named by `INTERRUPTION_QUEUE` is looked up ([`InterruptionQueue::named`]) when it is first used,
//! and again after every failed lookup, so a queue that does not exist yet, or that the controller may not read
//! yet, holds up nothing but interruption handling, which starts once the queue is there.
//!
//! Receive settings follow upstream's SQS provider: up to 10 messages, a 20 s visibility timeout and a 20 s long
//! poll.

use std::{sync::Arc, time::Duration};

use tokio::sync::OnceCell;

use crate::error::AwsError;
use crate::interruption::{InterruptionMessage, parse_interruption_message};

/// The most messages one ReceiveMessage returns (SQS's limit).
pub const MAX_MESSAGES: i32 = 10;
/// How long a received message stays hidden from other receivers.
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a receive waits for a message (SQS's maximum).
pub const LONG_POLL: Duration = Duration::from_secs(20);

/// One received message.
#[derive(Debug)]
pub struct ReceivedMessage {
    pub message_id: String,
    /// For [`InterruptionQueue::delete`].
    pub receipt_handle: String,
    /// The event; `Ok(None)` for an event that does not concern Karpenter, `Err` for a body that is not an
    /// interruption event at all.
    pub parsed: Result<Option<InterruptionMessage>, AwsError>,
}

/// The interruption queue.
#[derive(Debug, Clone)]
pub struct InterruptionQueue {
    sqs: aws_sdk_sqs::Client,
    /// The name it is looked up by (`INTERRUPTION_QUEUE`), when its URL was not given.
    name: Option<String>,
    /// Its URL, once known.
    url: Arc<OnceCell<String>>,
}

impl InterruptionQueue {
    /// The queue at `url`.
    pub fn new(sqs: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self {
            sqs,
            name: None,
            url: Arc::new(OnceCell::new_with(Some(url.into()))),
        }
    }

    /// The queue called `name` (the controller's `INTERRUPTION_QUEUE` setting), looked up when first used.
    pub fn named(sqs: aws_sdk_sqs::Client, name: impl Into<String>) -> Self {
        Self {
            sqs,
            name: Some(name.into()),
            url: Arc::new(OnceCell::new()),
        }
    }

    /// The queue called `name`, looked up now.
    pub async fn from_name(sqs: aws_sdk_sqs::Client, name: &str) -> Result<Self, AwsError> {
        let queue = Self::named(sqs, name);
        queue.resolved_url().await?;
        Ok(queue)
    }

    /// Its URL, once looked up.
    pub fn url(&self) -> Option<&str> {
        self.url.get().map(String::as_str)
    }

    /// How logs name it: its name, else its URL.
    pub fn describe(&self) -> &str {
        self.name.as_deref().or(self.url()).unwrap_or_default()
    }

    /// The URL, looked up by name if not known yet (a failed lookup is tried again next time).
    async fn resolved_url(&self) -> Result<&str, AwsError> {
        let url = self
            .url
            .get_or_try_init(|| async {
                let name = self.name.as_deref().unwrap_or_default();
                let output = self
                    .sqs
                    .get_queue_url()
                    .queue_name(name)
                    .send()
                    .await
                    .map_err(|e| AwsError::from_sdk("GetQueueUrl", e))?;
                output
                    .queue_url()
                    .map(str::to_string)
                    .ok_or_else(|| AwsError::InvalidResponse {
                        what: "GetQueueUrl".into(),
                        message: format!("no URL for queue {name}"),
                    })
            })
            .await?;
        Ok(url.as_str())
    }

    /// Waits up to `wait` (at most 20 s) for messages and returns them parsed.
    pub async fn receive(&self, wait: Duration) -> Result<Vec<ReceivedMessage>, AwsError> {
        let wait_seconds = wait.min(LONG_POLL).as_secs() as i32;
        let url = self.resolved_url().await?;
        let output = self
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(MAX_MESSAGES)
            .visibility_timeout(VISIBILITY_TIMEOUT.as_secs() as i32)
            .wait_time_seconds(wait_seconds)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("ReceiveMessage", e))?;
        Ok(output
            .messages()
            .iter()
            .filter_map(|message| {
                // A message without a receipt handle cannot be deleted or acted on; SQS always sends one.
                let receipt_handle = message.receipt_handle()?.to_string();
                Some(ReceivedMessage {
                    message_id: message.message_id().unwrap_or_default().to_string(),
                    receipt_handle,
                    parsed: parse_interruption_message(message.body().unwrap_or_default()),
                })
            })
            .collect())
    }

    /// Deletes a handled message.
    pub async fn delete(&self, receipt_handle: &str) -> Result<(), AwsError> {
        let url = self.resolved_url().await?;
        self.sqs
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("DeleteMessage", e))?;
        Ok(())
    }
}
