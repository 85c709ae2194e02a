//! When the operator's own serving certificate must be issued again: a pure decision over what
//! the Secret holds and the time.
//!
//! The CA lives much longer than the serving certificate, so renewing the serving certificate
//! leaves the APIService's caBundle as it is and nothing that trusts the CA notices. When the CA
//! itself nears its end, a new CA is made and the previous one stays in the bundle until it
//! expires, so a replica that still serves a certificate of the old CA is trusted meanwhile.

use std::time::Duration;

use time::OffsetDateTime;

use crate::tls::CertInfo;

/// How long certificates live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub serving_validity: Duration,
    pub ca_validity: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            serving_validity: Duration::from_secs(365 * 86_400),
            ca_validity: Duration::from_secs(10 * 365 * 86_400),
        }
    }
}

impl Policy {
    /// A serving certificate is renewed with a third of its life left.
    pub fn serving_renew_before(&self) -> Duration {
        self.serving_validity / 3
    }

    /// A CA is replaced with a third of its life left, and always early enough that a serving
    /// certificate issued just before could live its full term.
    pub fn ca_renew_before(&self) -> Duration {
        (self.ca_validity / 3).max(self.serving_validity + self.serving_renew_before())
    }
}

/// What the Secret was found to hold, already parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// No Secret yet.
    Missing,
    /// A Secret without a usable CA (a key missing, garbage, a key that does not match).
    Unusable(String),
    Usable {
        /// The newest CA (the first in the bundle), whose key the Secret holds.
        ca: CertInfo,
        /// The serving certificate, or why it cannot serve.
        serving: Result<CertInfo, String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Serve what the Secret holds; look again after this long.
    Serve { recheck_in: Duration },
    /// Keep the CA, issue a new serving certificate.
    RenewServing(String),
    /// Make a new CA (and a serving certificate it signs).
    NewCa(String),
}

/// The longest wait between two looks at the Secret when nothing changes it.
const MAX_RECHECK: Duration = Duration::from_secs(3600);
const MIN_RECHECK: Duration = Duration::from_secs(1);

pub fn plan(observed: &Observed, names: &[String], policy: &Policy, now: OffsetDateTime) -> Plan {
    let (ca, serving) = match observed {
        Observed::Missing => return Plan::NewCa("no certificate Secret yet".to_owned()),
        Observed::Unusable(why) => return Plan::NewCa(format!("the Secret is unusable: {why}")),
        Observed::Usable { ca, serving } => (ca, serving),
    };
    let left = |info: &CertInfo| (info.not_after - now).max(time::Duration::ZERO);
    let ca_left = left(ca);
    if ca_left < policy.ca_renew_before() {
        return Plan::NewCa(format!("the CA expires at {}", rfc3339(ca.not_after)));
    }
    let serving = match serving {
        Ok(serving) => serving,
        Err(why) => {
            return Plan::RenewServing(format!("the serving certificate is unusable: {why}"));
        }
    };
    if serving.issuer != ca.subject {
        return Plan::RenewServing(
            "the serving certificate is not signed by the current CA".into(),
        );
    }
    let mut wanted: Vec<&String> = names.iter().collect();
    let mut have: Vec<&String> = serving.dns_names.iter().collect();
    wanted.sort();
    have.sort();
    if wanted != have {
        return Plan::RenewServing(format!(
            "the serving certificate names {:?}, not {:?}",
            serving.dns_names, names
        ));
    }
    // Beyond the start-up minute a peer's clock may be off by: issued by a clock far ahead.
    if serving.not_before > now + MAX_RECHECK {
        return Plan::RenewServing(format!(
            "the serving certificate is not valid until {}",
            rfc3339(serving.not_before)
        ));
    }
    let serving_left = left(serving);
    if serving_left < policy.serving_renew_before() {
        return Plan::RenewServing(format!(
            "the serving certificate expires at {}",
            rfc3339(serving.not_after)
        ));
    }
    let until = |left: time::Duration, before: Duration| {
        Duration::try_from(left)
            .unwrap_or_default()
            .saturating_sub(before)
    };
    let recheck_in = until(serving_left, policy.serving_renew_before())
        .min(until(ca_left, policy.ca_renew_before()))
        .clamp(MIN_RECHECK, MAX_RECHECK);
    Plan::Serve { recheck_in }
}

/// The CA bundle after a new CA: the new one first, then earlier ones that are still valid, so
/// certificates they signed keep being trusted until they expire.
pub fn next_bundle(new_ca_pem: &str, old_bundle_pem: Option<&str>, now: OffsetDateTime) -> String {
    let mut bundle = new_ca_pem.trim_end().to_owned();
    bundle.push('\n');
    let old = old_bundle_pem
        .and_then(|old| pem::parse_many(old).ok())
        .unwrap_or_default();
    // At most two generations back: the bundle must not grow without bound.
    for block in old.iter().filter(|b| b.tag() == "CERTIFICATE").take(2) {
        let still_valid = x509_parser::parse_x509_certificate(block.contents())
            .map(|(_, cert)| cert.validity().not_after.to_datetime() > now)
            .unwrap_or(false);
        if still_valid {
            bundle.push_str(&pem::encode_config(
                block,
                pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
            ));
        }
    }
    bundle
}

fn rfc3339(at: OffsetDateTime) -> String {
    k8s_openapi::jiff::Timestamp::from_second(at.unix_timestamp())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| at.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{self, CaPem};

    const DAY: Duration = Duration::from_secs(86_400);

    fn names() -> Vec<String> {
        vec!["svc.ns.svc".to_owned(), "localhost".to_owned()]
    }

    fn observed(ca: &CaPem, serving_pem: &str) -> Observed {
        Observed::Usable {
            ca: tls::inspect(&ca.cert_pem).unwrap(),
            serving: Ok(tls::inspect(serving_pem).unwrap()),
        }
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    #[test]
    fn nothing_or_garbage_gets_a_new_ca() {
        let policy = Policy::default();
        assert!(matches!(
            plan(&Observed::Missing, &names(), &policy, now()),
            Plan::NewCa(_)
        ));
        let Plan::NewCa(why) = plan(
            &Observed::Unusable("no tls.key".into()),
            &names(),
            &policy,
            now(),
        ) else {
            panic!("expected a new CA")
        };
        assert!(why.contains("no tls.key"), "{why}");
    }

    #[test]
    fn an_unusable_serving_certificate_under_a_good_ca_is_renewed_under_that_ca() {
        let policy = Policy::default();
        let ca = tls::new_ca(policy.ca_validity).unwrap();
        let seen = Observed::Usable {
            ca: tls::inspect(&ca.cert_pem).unwrap(),
            serving: Err("no tls.key".to_owned()),
        };
        let Plan::RenewServing(why) = plan(&seen, &names(), &policy, now()) else {
            panic!("expected a renewal")
        };
        assert!(why.contains("no tls.key"), "{why}");
    }

    #[test]
    fn a_fresh_certificate_is_served_and_looked_at_again_within_the_hour() {
        let policy = Policy::default();
        let ca = tls::new_ca(policy.ca_validity).unwrap();
        let leaf = tls::issue_serving(&ca, &names(), policy.serving_validity).unwrap();
        assert_eq!(
            plan(&observed(&ca, &leaf.cert_pem), &names(), &policy, now()),
            Plan::Serve {
                recheck_in: MAX_RECHECK
            }
        );
        // Names in another order are the same names.
        let reversed: Vec<String> = names().into_iter().rev().collect();
        assert!(matches!(
            plan(&observed(&ca, &leaf.cert_pem), &reversed, &policy, now()),
            Plan::Serve { .. }
        ));
    }

    #[test]
    fn the_serving_certificate_is_renewed_with_a_third_of_its_life_left() {
        let policy = Policy::default();
        let ca = tls::new_ca(policy.ca_validity).unwrap();
        let leaf = tls::issue_serving(&ca, &names(), policy.serving_validity).unwrap();
        let seen = observed(&ca, &leaf.cert_pem);
        let end = tls::inspect(&leaf.cert_pem).unwrap().not_after;
        let renew_at = end - policy.serving_renew_before();
        // Just before the renewal point: served, and looked at again right when it is due.
        let before = renew_at - Duration::from_secs(30);
        let Plan::Serve { recheck_in } = plan(&seen, &names(), &policy, before) else {
            panic!("expected serve")
        };
        assert!(
            recheck_in <= Duration::from_secs(30) && recheck_in >= MIN_RECHECK,
            "{recheck_in:?}"
        );
        let Plan::RenewServing(why) = plan(&seen, &names(), &policy, renew_at + DAY) else {
            panic!("expected a renewal")
        };
        assert!(why.contains("expires"), "{why}");
        // Expired long ago: still renewed (not a new CA), since the CA is fine.
        assert!(matches!(
            plan(&seen, &names(), &policy, end + DAY),
            Plan::RenewServing(_)
        ));
    }

    #[test]
    fn a_serving_certificate_from_the_future_is_renewed_and_said_so() {
        let policy = Policy::default();
        let ca = tls::new_ca(policy.ca_validity).unwrap();
        let leaf = tls::issue_serving(&ca, &names(), policy.serving_validity).unwrap();
        let mut serving = tls::inspect(&leaf.cert_pem).unwrap();
        serving.not_before = now() + DAY;
        serving.not_after = now() + DAY * 300;
        let seen = Observed::Usable {
            ca: tls::inspect(&ca.cert_pem).unwrap(),
            serving: Ok(serving),
        };
        let Plan::RenewServing(why) = plan(&seen, &names(), &policy, now()) else {
            panic!("expected a renewal")
        };
        assert!(why.contains("not valid until"), "{why}");
    }

    #[test]
    fn new_names_or_a_foreign_issuer_renew_the_serving_certificate() {
        let policy = Policy::default();
        let ca = tls::new_ca(policy.ca_validity).unwrap();
        let leaf = tls::issue_serving(&ca, &names(), policy.serving_validity).unwrap();
        let Plan::RenewServing(why) = plan(
            &observed(&ca, &leaf.cert_pem),
            &["other.ns.svc".to_owned()],
            &policy,
            now(),
        ) else {
            panic!("expected a renewal")
        };
        assert!(why.contains("other.ns.svc"), "{why}");
        let other_ca = tls::new_ca(policy.ca_validity).unwrap();
        let foreign = tls::issue_serving(&other_ca, &names(), policy.serving_validity).unwrap();
        let Plan::RenewServing(why) =
            plan(&observed(&ca, &foreign.cert_pem), &names(), &policy, now())
        else {
            panic!("expected a renewal")
        };
        assert!(why.contains("not signed by the current CA"), "{why}");
    }

    #[test]
    fn a_ca_near_its_end_is_replaced_before_a_serving_certificate_could_outlive_it() {
        let policy = Policy::default();
        assert!(policy.ca_renew_before() >= policy.serving_validity);
        let short = tls::new_ca(policy.serving_validity).unwrap();
        let leaf = tls::issue_serving(&short, &names(), policy.serving_validity).unwrap();
        let Plan::NewCa(why) = plan(&observed(&short, &leaf.cert_pem), &names(), &policy, now())
        else {
            panic!("expected a new CA")
        };
        assert!(why.contains("the CA expires"), "{why}");
    }

    #[test]
    fn the_next_bundle_keeps_earlier_cas_only_while_they_are_valid() {
        let old = tls::new_ca(DAY).unwrap();
        let older = tls::new_ca(DAY * 2).unwrap();
        let new = tls::new_ca(DAY * 3650).unwrap();
        let previous = format!("{}{}", old.cert_pem, older.cert_pem);
        let bundle = next_bundle(&new.cert_pem, Some(&previous), now());
        let subjects: Vec<String> = tls::inspect_all(&bundle)
            .unwrap()
            .into_iter()
            .map(|c| c.subject)
            .collect();
        let subject = |ca: &CaPem| tls::inspect(&ca.cert_pem).unwrap().subject;
        assert_eq!(
            subjects,
            vec![subject(&new), subject(&old), subject(&older)]
        );
        // A day and a half later the first old CA has expired; only the newer two remain.
        let later = next_bundle(&new.cert_pem, Some(&previous), now() + DAY + DAY / 2);
        assert_eq!(tls::inspect_all(&later).unwrap().len(), 2);
        // Generations beyond two back are dropped, garbage is ignored.
        let long = format!("{}{}{}", old.cert_pem, older.cert_pem, new.cert_pem);
        assert_eq!(
            tls::inspect_all(&next_bundle(&new.cert_pem, Some(&long), now()))
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            tls::inspect_all(&next_bundle(&new.cert_pem, Some("garbage"), now()))
                .unwrap()
                .len(),
            1
        );
    }
}
