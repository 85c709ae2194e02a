//! Admission-time validation against the real kube-apiserver: every invalid spec is refused with
//! a message that names the field and says what to write; the samples and a scale-to-zero spec
//! are accepted, with the CRD's defaults filled in.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use llmscaleoperator::api::{
    LLMScaler, MetricProvider, MetricTargetType, ScaleDownBehavior, SelectPolicy,
};
use serde_json::{Value, json};

fn valid_spec() -> Value {
    json!({
        "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm" },
        "serverAddress": "http://prometheus.monitoring.svc:9090",
        "minReplicas": 1,
        "maxReplicas": 4,
        "metrics": [{ "name": "kv-cache", "query": "avg(vllm:kv_cache_usage_perc)", "target": "0.8" }]
    })
}

fn scaler(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .unwrap()
}

fn dynamic_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<LLMScaler>(&()))
}

/// Sets `value` at a JSON pointer inside the spec (creating the last key), or removes the key when
/// `value` is null.
fn with(mut spec: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let parent = spec
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent} in spec"));
    let object = parent.as_object_mut();
    match (object, value) {
        (Some(object), Value::Null) => {
            object.remove(key);
        }
        (Some(object), value) => {
            object.insert(key.to_owned(), value);
        }
        (None, value) => {
            let index: usize = key.parse().unwrap();
            parent.as_array_mut().unwrap()[index] = value;
        }
    }
    spec
}

struct Case {
    what: &'static str,
    spec: Value,
    /// Every fragment must appear in the apiserver's message.
    expect: Vec<&'static str>,
}

fn invalid_cases() -> Vec<Case> {
    let target = |t: &str| with(valid_spec(), "/metrics/0/target", json!(t));
    let decimal_hint = "metrics[].target must be a finite positive decimal number such as \"0.8\", \"80\" or \"2.5\"";
    let mut cases = vec![
        Case {
            what: "minReplicas above maxReplicas",
            spec: with(
                with(valid_spec(), "/minReplicas", json!(5)),
                "/maxReplicas",
                json!(2),
            ),
            expect: vec![
                "spec.minReplicas",
                "minReplicas must not be greater than maxReplicas: lower minReplicas or raise maxReplicas",
            ],
        },
        Case {
            what: "negative minReplicas",
            spec: with(valid_spec(), "/minReplicas", json!(-1)),
            expect: vec!["spec.minReplicas", "should be greater than or equal to 0"],
        },
        Case {
            what: "negative maxReplicas",
            spec: with(
                with(valid_spec(), "/minReplicas", json!(0)),
                "/maxReplicas",
                json!(-1),
            ),
            expect: vec!["spec.maxReplicas", "should be greater than or equal to 0"],
        },
        Case {
            what: "syncPeriodSeconds 0",
            spec: with(valid_spec(), "/syncPeriodSeconds", json!(0)),
            expect: vec![
                "spec.syncPeriodSeconds",
                "should be greater than or equal to 1",
            ],
        },
        Case {
            what: "retryPeriodSeconds 0",
            spec: with(valid_spec(), "/retryPeriodSeconds", json!(0)),
            expect: vec![
                "spec.retryPeriodSeconds",
                "should be greater than or equal to 1",
            ],
        },
        Case {
            what: "stabilization window above an hour",
            spec: with(
                valid_spec(),
                "/scaleDown",
                json!({ "stabilizationWindowSeconds": 3601 }),
            ),
            expect: vec![
                "spec.scaleDown.stabilizationWindowSeconds",
                "should be less than or equal to 3600",
            ],
        },
        Case {
            what: "negative stabilization window",
            spec: with(
                valid_spec(),
                "/scaleDown",
                json!({ "stabilizationWindowSeconds": -1 }),
            ),
            expect: vec![
                "spec.scaleDown.stabilizationWindowSeconds",
                "should be greater than or equal to 0",
            ],
        },
        Case {
            what: "negative maxStepReplicas",
            spec: with(valid_spec(), "/scaleDown", json!({ "maxStepReplicas": -1 })),
            expect: vec![
                "spec.scaleDown.maxStepReplicas",
                "should be greater than or equal to 0",
            ],
        },
        Case {
            what: "a percentage target",
            spec: target("80%"),
            expect: vec![
                "spec.metrics[0].target",
                "not a percentage: write \"0.8\" for a 0-1 ratio or \"80\" for a 0-100 series",
            ],
        },
        Case {
            what: "a zero target",
            spec: target("0"),
            expect: vec![
                "spec.metrics[0].target",
                "metrics[].target must be greater than zero",
            ],
        },
        Case {
            what: "an unknown metricProvider",
            spec: with(valid_spec(), "/metricProvider", json!("Datadog")),
            expect: vec![
                "spec.metricProvider",
                "supported values: \"Prometheus\", \"Custom\"",
            ],
        },
        Case {
            what: "a metric named like the external metrics API's own desired-replicas",
            spec: with(valid_spec(), "/metrics/0/name", json!("desired-replicas")),
            expect: vec![
                "spec.metrics[0].name",
                "must not be decision, desired-replicas, objective or metric-<number>",
            ],
        },
        Case {
            what: "a metric named like an unnamed one",
            spec: with(valid_spec(), "/metrics/0/name", json!("metric-1")),
            expect: vec![
                "spec.metrics[0].name",
                "must not be decision, desired-replicas, objective or metric-<number>",
            ],
        },
        Case {
            what: "a metric name that is not a DNS-1123 label",
            spec: with(valid_spec(), "/metrics/0/name", json!("KV_Cache")),
            expect: vec![
                "spec.metrics[0].name",
                "must be a DNS-1123 label",
                "e.g. kv-cache",
            ],
        },
        Case {
            what: "two metrics with the same name",
            spec: with(
                valid_spec(),
                "/metrics",
                json!([
                    { "name": "load", "query": "avg(a)", "target": "1" },
                    { "name": "load", "query": "avg(b)", "target": "2" }
                ]),
            ),
            expect: vec![
                "spec.metrics",
                "metrics[].name must be unique within the scaler",
            ],
        },
        Case {
            what: "Prometheus with no metrics",
            spec: with(valid_spec(), "/metrics", Value::Null),
            expect: vec![
                "spec.metrics",
                "metrics is required when metricProvider is Prometheus",
                "or set metricProvider: Custom",
            ],
        },
        Case {
            what: "Prometheus with an empty metrics list",
            spec: with(valid_spec(), "/metrics", json!([])),
            expect: vec![
                "spec.metrics",
                "metrics is required when metricProvider is Prometheus",
            ],
        },
        Case {
            what: "Custom with no customProvider",
            spec: with(valid_spec(), "/metricProvider", json!("Custom")),
            expect: vec![
                "spec.customProvider",
                "customProvider is required when metricProvider is Custom: set customProvider.serviceId",
            ],
        },
        Case {
            what: "no targetRef",
            spec: with(valid_spec(), "/targetRef", Value::Null),
            expect: vec!["spec.targetRef", "Required value"],
        },
        Case {
            what: "an empty targetRef.kind",
            spec: with(valid_spec(), "/targetRef/kind", json!("")),
            expect: vec!["spec.targetRef.kind", "at least 1 chars long"],
        },
        Case {
            what: "an empty targetRef.name",
            spec: with(valid_spec(), "/targetRef/name", json!("")),
            expect: vec!["spec.targetRef.name", "at least 1 chars long"],
        },
        Case {
            what: "no serverAddress",
            spec: with(valid_spec(), "/serverAddress", Value::Null),
            expect: vec!["spec.serverAddress", "Required value"],
        },
        Case {
            what: "a serverAddress longer than 2048 bytes",
            spec: with(
                valid_spec(),
                "/serverAddress",
                json!(format!("http://p/{}", "a".repeat(2100))),
            ),
            expect: vec!["spec.serverAddress", "Too long"],
        },
        Case {
            what: "seventeen metrics",
            spec: with(
                valid_spec(),
                "/metrics",
                json!(
                    (0..17)
                        .map(
                            |i| json!({ "name": format!("m{i}"), "query": "avg(x)", "target": "1" })
                        )
                        .collect::<Vec<_>>()
                ),
            ),
            expect: vec!["spec.metrics", "Too many"],
        },
        Case {
            what: "an empty query",
            spec: with(valid_spec(), "/metrics/0/query", json!("")),
            expect: vec!["spec.metrics[0].query", "at least 1 chars long"],
        },
        Case {
            what: "Custom with an empty serviceId",
            spec: with(
                with(valid_spec(), "/metricProvider", json!("Custom")),
                "/customProvider",
                json!({ "serviceId": "" }),
            ),
            expect: vec!["spec.customProvider.serviceId", "at least 1 chars long"],
        },
        Case {
            what: "a decision path longer than 1024 bytes",
            spec: with(
                with(valid_spec(), "/metricProvider", json!("Custom")),
                "/customProvider",
                json!({ "serviceId": "svc", "path": "p/".repeat(600) }),
            ),
            expect: vec!["spec.customProvider.path", "Too long"],
        },
        Case {
            what: "an unknown scaleDown.behavior",
            spec: with(valid_spec(), "/scaleDown", json!({ "behavior": "Random" })),
            expect: vec!["spec.scaleDown.behavior", "Unsupported value"],
        },
        Case {
            what: "syncPeriodSeconds written as a duration",
            spec: with(valid_spec(), "/syncPeriodSeconds", json!("15s")),
            expect: vec!["spec.syncPeriodSeconds", "must be of type integer"],
        },
        Case {
            what: "a negative retryPeriodSeconds",
            spec: with(valid_spec(), "/retryPeriodSeconds", json!(-5)),
            expect: vec![
                "spec.retryPeriodSeconds",
                "should be greater than or equal to 1",
            ],
        },
    ];
    for bad in ["-1", "NaN", "abc", "", "1e3", "Inf"] {
        cases.push(Case {
            what: "a target that is not a positive decimal",
            spec: target(bad),
            expect: vec!["spec.metrics[0].target", decimal_hint],
        });
    }
    for bad in [
        "prometheus:9090",
        "prometheus.monitoring.svc",
        "ftp://prometheus:21",
        "http://",
        "/api/v1/query",
        "",
    ] {
        cases.push(Case {
            what: "a serverAddress that is not an http(s) URL",
            spec: with(valid_spec(), "/serverAddress", json!(bad)),
            expect: vec!["spec.serverAddress"],
        });
    }
    let tolerance_hint =
        "must be a quoted decimal fraction from 0 up to (not including) 1, e.g. \"0.1\" for 10%";
    for (direction, bad) in [
        ("scaleUp", "1"),
        ("scaleUp", "10%"),
        ("scaleDown", "1.5"),
        ("scaleDown", "-0.1"),
        ("scaleDown", "0.1 "),
    ] {
        cases.push(Case {
            what: "a tolerance that is not a fraction below 1",
            spec: with(
                valid_spec(),
                &format!("/{direction}"),
                json!({"tolerance": bad}),
            ),
            expect: vec![
                if direction == "scaleUp" {
                    "spec.scaleUp.tolerance"
                } else {
                    "spec.scaleDown.tolerance"
                },
                tolerance_hint,
            ],
        });
    }
    for (what, policy, fragment) in [
        (
            "a policy of 0 pods",
            json!({"type": "Pods", "value": 0, "periodSeconds": 60}),
            "should be greater than or equal to 1",
        ),
        (
            "a policy period of 0 s",
            json!({"type": "Percent", "value": 100, "periodSeconds": 0}),
            "should be greater than or equal to 1",
        ),
        (
            "a policy period over 30 minutes",
            json!({"type": "Pods", "value": 4, "periodSeconds": 1801}),
            "should be less than or equal to 1800",
        ),
        (
            "a policy type that does not exist",
            json!({"type": "Replicas", "value": 4, "periodSeconds": 60}),
            "supported values: \"Pods\", \"Percent\"",
        ),
    ] {
        cases.push(Case {
            what,
            spec: with(valid_spec(), "/scaleUp", json!({"policies": [policy]})),
            expect: vec!["spec.scaleUp.policies[0]", fragment],
        });
    }
    cases.push(Case {
        what: "a selectPolicy that does not exist",
        spec: with(
            valid_spec(),
            "/scaleDown",
            json!({"selectPolicy": "Fastest"}),
        ),
        expect: vec![
            "spec.scaleDown.selectPolicy",
            "supported values: \"Max\", \"Min\", \"Disabled\"",
        ],
    });
    for (bad, fragment) in [
        (-1, "should be greater than or equal to 0"),
        (3601, "should be less than or equal to 3600"),
    ] {
        cases.push(Case {
            what: "a startupSeconds out of range",
            spec: with(valid_spec(), "/startupSeconds", json!(bad)),
            expect: vec!["spec.startupSeconds", fragment],
        });
        cases.push(Case {
            what: "a scale-up window out of range",
            spec: with(
                valid_spec(),
                "/scaleUp",
                json!({"stabilizationWindowSeconds": bad}),
            ),
            expect: vec!["spec.scaleUp.stabilizationWindowSeconds", fragment],
        });
    }
    cases.push(Case {
        what: "a targetType that does not exist",
        spec: with(valid_spec(), "/metrics/0/targetType", json!("Sum")),
        expect: vec![
            "spec.metrics[0].targetType",
            "supported values: \"Value\", \"AverageValue\"",
        ],
    });
    let to_zero = |zero: Value| {
        with(
            with(valid_spec(), "/minReplicas", json!(0)),
            "/scaleToZero",
            zero,
        )
    };
    cases.push(Case {
        what: "scaleToZero with a floor",
        spec: with(
            valid_spec(),
            "/scaleToZero",
            json!({ "activationQuery": "sum(x)" }),
        ),
        expect: vec!["spec.scaleToZero", "scaleToZero needs minReplicas: 0"],
    });
    cases.push(Case {
        what: "scaleToZero under the Custom provider",
        spec: with(
            with(
                with(
                    to_zero(json!({ "activationQuery": "sum(x)" })),
                    "/metricProvider",
                    json!("Custom"),
                ),
                "/customProvider",
                json!({ "serviceId": "llama" }),
            ),
            "/metrics",
            Value::Null,
        ),
        expect: vec![
            "spec.scaleToZero",
            "scaleToZero works with metricProvider Prometheus",
        ],
    });
    for bad in ["-1", "1e3", "0.5%", ""] {
        cases.push(Case {
            what: "an activationThreshold that is not a decimal",
            spec: to_zero(json!({ "activationQuery": "sum(x)", "activationThreshold": bad })),
            expect: vec![
                "spec.scaleToZero.activationThreshold",
                "activationThreshold must be a quoted decimal number from 0",
            ],
        });
    }
    cases.push(Case {
        what: "scaleToZero without an activation query",
        spec: to_zero(json!({ "idleSeconds": 60 })),
        expect: vec!["spec.scaleToZero.activationQuery", "Required value"],
    });
    cases.push(Case {
        what: "scaleToZero with an empty activation query",
        spec: to_zero(json!({ "activationQuery": "" })),
        expect: vec![
            "spec.scaleToZero.activationQuery",
            "should be at least 1 chars long",
        ],
    });
    cases.push(Case {
        what: "serverTLS over plain HTTP",
        spec: with(
            valid_spec(),
            "/serverTLS",
            json!({ "ca": { "secretName": "prom-ca" } }),
        ),
        expect: vec![
            "spec.serverTLS",
            "serverTLS needs an https:// serverAddress",
        ],
    });
    for auth in [
        json!({}),
        json!({ "basic": { "secretName": "a" }, "bearer": { "secretName": "b" } }),
    ] {
        cases.push(Case {
            what: "serverAuth with neither or both",
            spec: with(valid_spec(), "/serverAuth", auth),
            expect: vec![
                "spec.serverAuth",
                "serverAuth takes exactly one of basic and bearer",
            ],
        });
    }
    cases.push(Case {
        what: "a fallback above maxReplicas",
        spec: with(
            valid_spec(),
            "/fallback",
            json!({ "failureThreshold": 3, "replicas": 5 }),
        ),
        expect: vec![
            "spec.fallback.replicas",
            "fallback.replicas must not be greater than maxReplicas",
        ],
    });
    cases.push(Case {
        what: "a fallback with no threshold",
        spec: with(
            valid_spec(),
            "/fallback",
            json!({ "failureThreshold": 0, "replicas": 2 }),
        ),
        expect: vec![
            "spec.fallback.failureThreshold",
            "should be greater than or equal to 1",
        ],
    });
    cases.push(Case {
        what: "a fallback with too high a threshold",
        spec: with(
            valid_spec(),
            "/fallback",
            json!({ "failureThreshold": 1001, "replicas": 2 }),
        ),
        expect: vec![
            "spec.fallback.failureThreshold",
            "should be less than or equal to 1000",
        ],
    });
    cases.push(Case {
        what: "a fallback of no replicas",
        spec: with(
            valid_spec(),
            "/fallback",
            json!({ "failureThreshold": 3, "replicas": 0 }),
        ),
        expect: vec![
            "spec.fallback.replicas",
            "should be greater than or equal to 1",
        ],
    });
    for (field, value, expect) in [
        ("idleSeconds", -1, "should be greater than or equal to 0"),
        (
            "idleSeconds",
            86_401,
            "should be less than or equal to 86400",
        ),
        (
            "minAwakeSeconds",
            -1,
            "should be greater than or equal to 0",
        ),
        (
            "minAwakeSeconds",
            86_401,
            "should be less than or equal to 86400",
        ),
    ] {
        cases.push(Case {
            what: "a scaleToZero period out of range",
            spec: to_zero(json!({ "activationQuery": "sum(x)", field: value })),
            expect: vec![
                match field {
                    "idleSeconds" => "spec.scaleToZero.idleSeconds",
                    _ => "spec.scaleToZero.minAwakeSeconds",
                },
                expect,
            ],
        });
    }
    let https = with(
        valid_spec(),
        "/serverAddress",
        json!("https://prometheus:9090"),
    );
    for (spec, path, secret) in [
        (
            valid_spec(),
            "/serverAuth",
            json!({ "basic": { "secretName": "" } }),
        ),
        (
            valid_spec(),
            "/serverAuth",
            json!({ "bearer": { "secretName": "" } }),
        ),
        (
            https.clone(),
            "/serverTLS",
            json!({ "ca": { "secretName": "" } }),
        ),
        (
            https.clone(),
            "/serverTLS",
            json!({ "clientCertificate": { "secretName": "" } }),
        ),
    ] {
        cases.push(Case {
            what: "a Secret without a name",
            spec: with(spec, path, secret),
            expect: vec!["secretName", "should be at least 1 chars long"],
        });
    }
    for bad in ["apps", "Apps/V1", "/v1", "apps/", "apps/1", "apps/v1/extra"] {
        cases.push(Case {
            what: "a targetRef.apiVersion without a group/version shape",
            spec: with(valid_spec(), "/targetRef/apiVersion", json!(bad)),
            expect: vec![
                "spec.targetRef.apiVersion",
                "targetRef.apiVersion must be group/version, e.g. apps/v1",
            ],
        });
    }
    let objective = |field: &str, value: Value| {
        let mut o = json!({ "selector": "model_name=\"m\"" });
        o[field] = value;
        with(with(valid_spec(), "/metrics", Value::Null), "/objective", o)
    };
    for (what, field, value, expect) in [
        (
            "an objective whose selector closes the braces",
            "selector",
            json!("model_name=\"m\"} or vector(100) or up{job=\"x\""),
            vec![
                "spec.objective.selector",
                "objective.selector must be PromQL label matchers without braces",
            ],
        ),
        (
            "an objective whose selector is not matchers",
            "selector",
            json!("llama"),
            vec![
                "spec.objective.selector",
                "objective.selector must be PromQL label matchers",
            ],
        ),
        (
            "an objective with a TTFT with a unit",
            "ttftSeconds",
            json!("2s"),
            vec![
                "spec.objective.ttftSeconds",
                "objective.ttftSeconds must be a quoted decimal above 0",
            ],
        ),
        (
            "an objective with a TPOT of zero",
            "tpotSeconds",
            json!("0"),
            vec![
                "spec.objective.tpotSeconds",
                "objective.tpotSeconds must be a quoted decimal above 0",
            ],
        ),
        (
            "an objective at the 100th percentile",
            "percentile",
            json!("100"),
            vec![
                "spec.objective.percentile",
                "from 50 up to (not including) 100",
            ],
        ),
        (
            "an objective starting from no requests per pod",
            "initialRequestsPerPod",
            json!("0.1"),
            vec!["spec.objective.initialRequestsPerPod", "from 0.25 to 256"],
        ),
        (
            "an objective with an empty pendingQuery",
            "pendingQuery",
            json!(""),
            vec!["spec.objective.pendingQuery", "at least 1 chars long"],
        ),
    ] {
        cases.push(Case {
            what,
            spec: objective(field, value),
            expect,
        });
    }
    cases.push(Case {
        what: "an objective under the Custom provider",
        spec: with(
            with(
                with(
                    valid_spec(),
                    "/objective",
                    json!({ "selector": "model_name=\"m\"" }),
                ),
                "/metricProvider",
                json!("Custom"),
            ),
            "/customProvider",
            json!({ "serviceId": "llama" }),
        ),
        expect: vec![
            "spec.objective",
            "objective works with metricProvider Prometheus",
        ],
    });
    // The recurrence remembers one signal's load.
    let remembering = |spec: Value| with(spec, "/recurrence", json!({}));
    let two_metrics = with(
        valid_spec(),
        "/metrics",
        json!([
            { "name": "kv-cache", "query": "avg(vllm:kv_cache_usage_perc)", "target": "0.8" },
            { "name": "queue", "query": "sum(vllm:num_requests_waiting)", "target": "4" },
        ]),
    );
    for (what, spec) in [
        ("a recurrence over two metrics", remembering(two_metrics)),
        (
            "a recurrence over an objective and a metric",
            remembering(with(
                valid_spec(),
                "/objective",
                json!({ "selector": "model_name=\"m\"" }),
            )),
        ),
        (
            "a recurrence under the Custom provider",
            remembering(with(
                with(
                    with(valid_spec(), "/metricProvider", json!("Custom")),
                    "/customProvider",
                    json!({ "serviceId": "llama" }),
                ),
                "/metrics",
                Value::Null,
            )),
        ),
    ] {
        cases.push(Case {
            what,
            spec,
            expect: vec![
                "spec.recurrence",
                "recurrence remembers the load of one signal",
            ],
        });
    }
    for (what, value, expect) in [
        (
            "a recurrence period under an hour",
            json!({ "periodSeconds": 900 }),
            "spec.recurrence.periodSeconds",
        ),
        (
            "a recurrence over no period",
            json!({ "periods": 0 }),
            "spec.recurrence.periods",
        ),
    ] {
        cases.push(Case {
            what,
            spec: with(valid_spec(), "/recurrence", value),
            expect: vec![expect],
        });
    }
    cases.push(Case {
        what: "a metric named objective",
        spec: with(valid_spec(), "/metrics/0/name", json!("objective")),
        expect: vec!["must not be decision, desired-replicas, objective or metric-<number>"],
    });
    cases
}

#[tokio::test]
async fn invalid_specs_are_rejected_with_a_message_naming_the_field() {
    let client = common::client().await;
    common::ensure_crd(&client).await;
    let ns = common::namespace(&client, "admission-invalid").await;
    let api = dynamic_api(&client, &ns);

    let mut failures = Vec::new();
    let cases = invalid_cases();
    assert!(
        cases.len() >= 30,
        "the table holds {} invalid specs",
        cases.len()
    );
    for (i, case) in cases.into_iter().enumerate() {
        let spec_text = case.spec.to_string();
        match api
            .create(
                &PostParams::default(),
                &scaler(&format!("bad-{i}"), case.spec),
            )
            .await
        {
            Ok(_) => failures.push(format!("{}: accepted {spec_text}", case.what)),
            Err(kube::Error::Api(status)) => {
                if status.code != 422 {
                    failures.push(format!(
                        "{}: HTTP {} {}",
                        case.what, status.code, status.message
                    ));
                }
                for fragment in &case.expect {
                    if !status.message.contains(fragment) {
                        failures.push(format!(
                            "{}: message lacks {fragment:?}: {}",
                            case.what, status.message
                        ));
                    }
                }
            }
            Err(other) => failures.push(format!("{}: {other}", case.what)),
        }
    }
    // serverAddress cases share one expectation; check the wording once on a plain host:port.
    let err = api
        .create(
            &PostParams::default(),
            &scaler(
                "bad-address",
                with(valid_spec(), "/serverAddress", json!("prometheus:9090")),
            ),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    if !status.message.contains("serverAddress must be an http:// or https:// URL with a host, e.g. http://prometheus-operated.monitoring.svc:9090")
    {
        failures.push(format!("serverAddress message: {}", status.message));
    }

    common::delete_namespace(&client, &ns).await;
    assert!(
        failures.is_empty(),
        "{} admission checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn samples_and_scale_to_zero_are_accepted_with_defaults() {
    let client = common::client().await;
    common::ensure_crd(&client).await;
    let ns = common::namespace(&client, "admission-valid").await;
    let api = dynamic_api(&client, &ns);
    let typed: Api<LLMScaler> = Api::namespaced(client.clone(), &ns);

    for sample in [
        "config/samples/autoscaling_v1alpha1_llmscaler.yaml",
        "config/samples/autoscaling_v1alpha1_llmscaler_customprovider.yaml",
        "config/samples/autoscaling_v1alpha1_llmscaler_inflight.yaml",
        "config/samples/autoscaling_v1alpha1_llmscaler_scaletozero.yaml",
        "config/samples/autoscaling_v1alpha1_llmscaler_objective.yaml",
    ] {
        let object: DynamicObject = common::read_yaml(sample);
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{sample} was rejected: {e}"));
    }

    let prometheus = typed.get("llmscaler-sample").await.unwrap();
    assert_eq!(
        prometheus.spec.metric_provider,
        MetricProvider::Prometheus,
        "defaulted provider"
    );
    assert_eq!(prometheus.spec.scale_down.max_step_replicas, 1);
    assert_eq!(
        prometheus.spec.scale_down.behavior,
        ScaleDownBehavior::CacheAware
    );

    let inflight = typed.get("llmscaler-inflight-sample").await.unwrap();
    assert_eq!(
        inflight.spec.metrics.as_ref().unwrap()[0].target_type,
        MetricTargetType::AverageValue
    );
    assert_eq!(inflight.spec.scale_down.tolerance, "0.05");
    assert_eq!(
        inflight.spec.scale_up.tolerance, "0.1",
        "the fields not written take their defaults"
    );

    let custom = typed.get("llmscaler-custom-provider-sample").await.unwrap();
    assert_eq!(custom.spec.metric_provider, MetricProvider::Custom);
    assert_eq!(
        custom.spec.sync_period_seconds, 15,
        "defaulted syncPeriodSeconds"
    );
    assert_eq!(
        custom.spec.retry_period_seconds, 10,
        "defaulted retryPeriodSeconds"
    );
    assert_eq!(
        custom.spec.scale_down.behavior,
        ScaleDownBehavior::CacheAware,
        "defaulted behavior"
    );
    assert_eq!(
        custom.spec.custom_provider.as_ref().unwrap().path,
        "/decisions"
    );
    assert!(custom.spec.metrics.is_none(), "Custom needs no metrics");

    // An objective needs no metrics; a bare one takes the common serving SLO.
    let objective = typed.get("llmscaler-objective-sample").await.unwrap();
    assert!(objective.spec.metrics.is_none());
    let bare = with(
        with(valid_spec(), "/metrics", Value::Null),
        "/objective",
        json!({ "selector": "namespace=\"prod\", app=\"vllm\"" }),
    );
    api.create(&PostParams::default(), &scaler("bare-objective", bare))
        .await
        .unwrap();
    let bare = typed.get("bare-objective").await.unwrap();
    let o = bare.spec.objective.unwrap();
    assert_eq!(
        (
            o.ttft_seconds.as_str(),
            o.tpot_seconds.as_str(),
            o.percentile.as_str(),
            o.initial_requests_per_pod
        ),
        ("2", "0.1", "99", None)
    );

    // A recurrence with nothing stated remembers a day, and yesterday alone starts pods early.
    let remembering = with(
        with(valid_spec(), "/metrics", Value::Null),
        "/objective",
        json!({ "selector": "model_name=\"m\"" }),
    );
    api.create(
        &PostParams::default(),
        &scaler("remembering", with(remembering, "/recurrence", json!({}))),
    )
    .await
    .unwrap();
    let remembering = typed.get("remembering").await.unwrap();
    let r = remembering.spec.recurrence.unwrap();
    assert_eq!((r.period_seconds, r.periods), (86_400, 1));

    let sleeper = typed.get("llmscaler-scale-to-zero-sample").await.unwrap();
    assert_eq!(
        sleeper.spec.scale_to_zero.as_ref().unwrap().idle_seconds,
        900
    );
    // A bare scaleToZero takes its defaults.
    let bare = with(
        with(valid_spec(), "/minReplicas", json!(0)),
        "/scaleToZero",
        json!({ "activationQuery": "sum(rate(router_requests_total[1m]))" }),
    );
    api.create(&PostParams::default(), &scaler("bare-zero", bare))
        .await
        .unwrap();
    let bare = typed.get("bare-zero").await.unwrap();
    let zero = bare.spec.scale_to_zero.unwrap();
    assert_eq!(
        (
            zero.activation_threshold.as_str(),
            zero.idle_seconds,
            zero.min_awake_seconds
        ),
        ("0", 300, 600)
    );

    // Scale-to-zero, and a pinned-at-zero fleet, are legitimate specs.
    let zero = with(valid_spec(), "/minReplicas", json!(0));
    api.create(&PostParams::default(), &scaler("scale-to-zero", zero))
        .await
        .unwrap();
    let pinned = with(
        with(valid_spec(), "/minReplicas", json!(0)),
        "/maxReplicas",
        json!(0),
    );
    api.create(&PostParams::default(), &scaler("pinned-at-zero", pinned))
        .await
        .unwrap();
    // Every accepted target shape.
    for (i, t) in ["0.8", "80", "2.5", ".5", "100"].iter().enumerate() {
        api.create(
            &PostParams::default(),
            &scaler(
                &format!("target-{i}"),
                with(valid_spec(), "/metrics/0/target", json!(t)),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("target {t:?} was rejected: {e}"));
    }
    let defaulted = typed.get("scale-to-zero").await.unwrap();
    assert_eq!(defaulted.spec.min_replicas, 0);
    // The HPA's behavior defaults, filled in by the apiserver.
    let down = &defaulted.spec.scale_down;
    assert_eq!(
        down.stabilization_window_seconds, 300,
        "defaulted scaleDown"
    );
    assert_eq!(down.tolerance, "0.1");
    assert_eq!(down.select_policy, SelectPolicy::Max);
    assert_eq!(
        serde_json::to_value(&down.policies).unwrap(),
        json!([{"type": "Percent", "value": 100, "periodSeconds": 15}])
    );
    let up = &defaulted.spec.scale_up;
    assert_eq!(
        (up.stabilization_window_seconds, up.tolerance.as_str()),
        (0, "0.1")
    );
    assert_eq!(
        serde_json::to_value(&up.policies).unwrap(),
        json!([
            {"type": "Percent", "value": 100, "periodSeconds": 15},
            {"type": "Pods", "value": 4, "periodSeconds": 15},
        ])
    );
    assert_eq!(defaulted.spec.startup_seconds, None, "learned unless set");
    assert_eq!(
        defaulted.spec.metrics.as_ref().unwrap()[0].target_type,
        MetricTargetType::Value
    );
    // A spec written for the HPA's vocabulary is accepted as written.
    let hpa_like = with(
        with(
            valid_spec(),
            "/scaleUp",
            json!({"stabilizationWindowSeconds": 30, "tolerance": "0.05", "selectPolicy": "Min",
                   "policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]}),
        ),
        "/startupSeconds",
        json!(240),
    );
    api.create(&PostParams::default(), &scaler("hpa-like", hpa_like))
        .await
        .unwrap();
    let stored = typed.get("hpa-like").await.unwrap();
    assert_eq!(stored.spec.scale_up.select_policy, SelectPolicy::Min);
    assert_eq!(stored.spec.startup_seconds, Some(240));

    common::delete_namespace(&client, &ns).await;
}

/// What `kubectl explain llmscaler.spec.scaleDown` shows comes from the OpenAPI document the API
/// server publishes for the CRD: every field there carries a description.
#[tokio::test]
async fn published_openapi_describes_every_scale_down_field() {
    let client = common::client().await;
    common::ensure_crd(&client).await;
    let doc = common::eventually(
        "the CRD's OpenAPI v3 document",
        std::time::Duration::from_secs(60),
        || async {
            let request =
                http::Request::get("/openapi/v3/apis/autoscaling.modelsphere.dev/v1alpha1")
                    .body(Vec::new())
                    .unwrap();
            let text = client.request_text(request).await.ok()?;
            let doc: Value = serde_json::from_str(&text).ok()?;
            doc.pointer("/components/schemas/dev.modelsphere.autoscaling.v1alpha1.LLMScaler")
                .is_some()
                .then_some(doc)
        },
    )
    .await;
    let scaler = &doc["components"]["schemas"]["dev.modelsphere.autoscaling.v1alpha1.LLMScaler"];
    let scale_down = &scaler["properties"]["spec"]["properties"]["scaleDown"];
    let described = |v: &Value| v["description"].as_str().is_some_and(|d| d.len() > 20);
    assert!(
        described(scale_down),
        "spec.scaleDown has no description: {scale_down}"
    );
    for field in [
        "stabilizationWindowSeconds",
        "tolerance",
        "selectPolicy",
        "policies",
        "maxStepReplicas",
        "behavior",
        "deletionCostQuery",
    ] {
        let property = &scale_down["properties"][field];
        assert!(
            described(property),
            "spec.scaleDown.{field} has no description: {property}"
        );
    }
    let spec = &scaler["properties"]["spec"]["properties"];
    for field in [
        "stabilizationWindowSeconds",
        "tolerance",
        "selectPolicy",
        "policies",
    ] {
        let property = &spec["scaleUp"]["properties"][field];
        assert!(
            described(property),
            "spec.scaleUp.{field} has no description: {property}"
        );
    }
    assert!(
        described(&spec["startupSeconds"]),
        "spec.startupSeconds has no description"
    );
    assert!(
        described(&spec["metrics"]["items"]["properties"]["targetType"]),
        "spec.metrics[].targetType has no description"
    );
    assert!(
        scale_down["properties"]["behavior"]["description"]
            .as_str()
            .unwrap()
            .contains("pod-deletion-cost"),
        "behavior explains the mechanism"
    );
    // What `kubectl explain` shows for the fields of scale-to-zero, fallback and server access.
    for path in [
        "/scaleToZero",
        "/scaleToZero/properties/activationQuery",
        "/scaleToZero/properties/activationThreshold",
        "/scaleToZero/properties/idleSeconds",
        "/scaleToZero/properties/minAwakeSeconds",
        "/fallback",
        "/fallback/properties/failureThreshold",
        "/fallback/properties/replicas",
        "/serverTLS",
        "/serverTLS/properties/ca",
        "/serverTLS/properties/clientCertificate",
        "/serverAuth",
        "/serverAuth/properties/basic",
        "/serverAuth/properties/bearer",
    ] {
        let property = spec.pointer(path).unwrap_or(&Value::Null);
        assert!(
            described(property),
            "spec{} has no description: {property}",
            path.replace("/properties/", ".").replace('/', ".")
        );
    }
    assert!(
        spec["scaleToZero"]["description"]
            .as_str()
            .unwrap()
            .contains("cannot wake"),
        "scaleToZero says why a per-pod metric is not enough"
    );
}
