//! Writes a scaler's events (events.k8s.io/v1), folding a repeat within [`SERIES_WINDOW`] into
//! the first event's series, as kube's `Recorder` does, but with what it must remember of the
//! events kept in the scaler's own memory record.
//!
//! Why not kube's `Recorder`: it keeps every event it published in the last six minutes in one
//! table for the whole process, and scans that table at every publish. On a fleet of 20,000
//! scalers each told something at creation, that was about 3 KiB per scaler held for minutes
//! (and the table's capacity for good), and a scan of tens of thousands of events per event.
//! Here a repeat is found among the few recent events of its own scaler, which are dropped with
//! the rest of its record when the scaler goes.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};

use super::memory::{Memories, RecentEvent};
use crate::api::LLMScaler;

/// How long a repeat of an event adds to its series rather than making a new event (kube's
/// `Recorder` uses the same six minutes).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// One event to tell about a scaler.
pub struct Told<'a> {
    pub warning: bool,
    pub reason: &'a str,
    pub action: String,
    pub note: String,
}

impl Told<'_> {
    /// What makes a repeat: the same type, reason and action (the action digests the message).
    fn key(&self) -> u64 {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut hasher = DefaultHasher::new();
        (self.warning, self.reason, &self.action).hash(&mut hasher);
        hasher.finish()
    }
}

/// The writer of this process's events: who reports them, and the client it writes with.
pub struct EventWriter {
    client: Client,
    controller: String,
    instance: String,
}

impl EventWriter {
    /// `instance` defaults to the controller's name, as kube's `Reporter` does.
    pub fn new(client: Client, controller: String, instance: Option<String>) -> Self {
        let instance = instance.unwrap_or_else(|| controller.clone());
        Self {
            client,
            controller,
            instance,
        }
    }

    /// Creates the event, or adds to the series of the same event told within the window.
    pub async fn tell(
        &self,
        memory: &Memories,
        scaler: &LLMScaler,
        told: &Told<'_>,
    ) -> Result<(), kube::Error> {
        let uid = scaler.uid().unwrap_or_default();
        let now = Timestamp::now();
        let key = told.key();
        let events: Api<Event> =
            Api::namespaced(self.client.clone(), &scaler.namespace().unwrap_or_default());
        if let Some(recent) = memory.recent_event(&uid, key, now, SERIES_WINDOW) {
            let count = recent.count + 1;
            let series = Event {
                series: Some(EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                }),
                ..Event::default()
            };
            match events
                .patch(
                    &recent.name,
                    &PatchParams::default(),
                    &Patch::Merge(&series),
                )
                .await
            {
                Ok(_) => {
                    memory.told_event(
                        &uid,
                        RecentEvent {
                            key,
                            name: recent.name,
                            count,
                            last: now,
                        },
                    );
                    return Ok(());
                }
                // Gone (deleted, or expired early): told afresh below.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        let event = self.event(scaler.object_ref(&()), told, now);
        let name = event.metadata.name.clone().unwrap_or_default();
        events.create(&PostParams::default(), &event).await?;
        memory.told_event(
            &uid,
            RecentEvent {
                key,
                name,
                count: 1,
                last: now,
            },
        );
        Ok(())
    }

    /// A new event, named as kube's `Recorder` names them (the object's name and the instant).
    fn event(&self, regarding: ObjectReference, told: &Told<'_>, now: Timestamp) -> Event {
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some(told.action.clone()),
            reason: Some(told.reason.to_owned()),
            note: Some(told.note.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(if told.warning { "Warning" } else { "Normal" }.to_owned()),
            ..Event::default()
        }
    }
}
