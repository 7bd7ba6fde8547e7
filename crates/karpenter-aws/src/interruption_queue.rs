//! The SQS queue interruption events arrive on: long-poll receive, parse each body with
//! [`parse_interruption_message`], delete by receipt handle. The interruption controller decides what to do with
//! each message; every message, understood or not, is deleted once handled, so a malformed one is not
//! received again and again.
//!
//! Receive settings follow upstream's SQS provider: up to 10 messages, a 20 s visibility timeout and a 20 s long
//! poll.

use std::time::Duration;

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
    url: String,
}

impl InterruptionQueue {
    pub fn new(sqs: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self { sqs, url: url.into() }
    }

    /// The queue called `name` (the controller's `INTERRUPTION_QUEUE` setting).
    pub async fn from_name(sqs: aws_sdk_sqs::Client, name: &str) -> Result<Self, AwsError> {
        let output = sqs
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("GetQueueUrl", e))?;
        let url = output.queue_url().ok_or_else(|| AwsError::InvalidResponse {
            what: "GetQueueUrl".into(),
            message: format!("no URL for queue {name}"),
        })?;
        Ok(Self::new(sqs, url))
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Waits up to `wait` (at most 20 s) for messages and returns them parsed.
    pub async fn receive(&self, wait: Duration) -> Result<Vec<ReceivedMessage>, AwsError> {
        let wait_seconds = wait.min(LONG_POLL).as_secs() as i32;
        let output = self
            .sqs
            .receive_message()
            .queue_url(&self.url)
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
        self.sqs
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("DeleteMessage", e))?;
        Ok(())
    }
}
