//! Asking the API server: TokenReview for bearer tokens, SubjectAccessReview for every request.
//! Answers, allowed and denied alike, are remembered for a few seconds so a busy HPA does not
//! turn into a review per request.

use std::hash::Hash;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use moka::sync::Cache;

use super::authn::UserInfo;

const TTL: Duration = Duration::from_secs(10);
const MAX_ENTRIES: u64 = 10_000;

/// Answers kept for [`TTL`], at most [`MAX_ENTRIES`] of them.
fn remembered<K, V>() -> Cache<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(MAX_ENTRIES)
        .time_to_live(TTL)
        .build()
}

/// What is being asked for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reading one metric (a collection read: verb list, resource = the metric's name).
    Metric { namespace: String, metric: String },
    /// Discovery and other paths.
    Path(String),
}

pub struct Reviewer {
    client: Client,
    tokens: Cache<String, Option<UserInfo>>,
    decisions: Cache<(UserInfo, Access), bool>,
}

impl Reviewer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            tokens: remembered(),
            decisions: remembered(),
        }
    }

    /// The user behind a bearer token, or `None` if the API server does not accept it.
    pub async fn user_of(&self, token: &str) -> Result<Option<UserInfo>, kube::Error> {
        if let Some(known) = self.tokens.get(token) {
            return Ok(known);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        let user = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .map(|u| UserInfo {
                name: u.username.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default().into_iter().collect(),
            });
        self.tokens.insert(token.to_owned(), user.clone());
        Ok(user)
    }

    /// Whether `user` may have `access`.
    pub async fn allowed(&self, user: &UserInfo, access: &Access) -> Result<bool, kube::Error> {
        if user.groups.iter().any(|g| g == "system:masters") {
            return Ok(true);
        }
        let key = (user.clone(), access.clone());
        if let Some(known) = self.decisions.get(&key) {
            return Ok(known);
        }
        let (resource_attributes, non_resource_attributes) = match access {
            Access::Metric { namespace, metric } => (
                Some(ResourceAttributes {
                    group: Some("external.metrics.k8s.io".to_owned()),
                    version: Some("v1beta1".to_owned()),
                    resource: Some(metric.clone()),
                    namespace: Some(namespace.clone()),
                    verb: Some("list".to_owned()),
                    ..Default::default()
                }),
                None,
            ),
            Access::Path(path) => (
                None,
                Some(NonResourceAttributes {
                    path: Some(path.clone()),
                    verb: Some("get".to_owned()),
                }),
            ),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone().into_iter().collect()),
                resource_attributes,
                non_resource_attributes,
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        self.decisions.insert(key, allowed);
        Ok(allowed)
    }
}
