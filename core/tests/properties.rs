//! Property tests: a response is bound to exactly what was shown; batches keep the model's order.

mod common;
use common::*;
use proptest::prelude::*;
use serde_json::{Value, json};
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap()
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z\u{200B}\u{202E}]{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The displayed arguments a request renders from its canonical text are exactly
    /// `serde_json`'s pretty JSON of the arguments, escaped for display (what was shown before
    /// the text was kept).
    #[test]
    fn displayed_arguments_from_text_are_those_of_the_value(v in arb_json(), f in any::<f64>().prop_filter("finite", |f| f.is_finite()), n in any::<u64>()) {
        for v in [v.clone(), json!({"nested": [v, {}, [], [[]], {"k": {}}], "f": f, "n": n, "s": "a\"b\\c\n\u{0}\u{202E}\u{FE0F}"})] {
            let text = Arguments::new(&v);
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            prop_assert_eq!(display::display_arguments_json(text.json()), display::escape_for_display(&pretty).into_owned());
        }
    }

    /// For arbitrary arguments, a response naming another digest or tool is rejected and the
    /// request stays; the bound response approves exactly the arguments shown.
    /// A request's `details()` are its JSON form without the four fields a binding hands over
    /// on its own, and nothing else: what a listener reads from them is what the bus says.
    #[test]
    fn details_are_the_json_form_less_id_tool_and_arguments(args in arb_json(), meta in arb_json(), call_id in prop::option::of("\\PC{0,8}")) {
        let g = Gate::builder().tool(Tool::builder("send_it").requires_approval().build()).build().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(None));
        let keep = seen.clone();
        let _approver = g.on_request_inline(move |p| {
            *keep.lock().unwrap() = Some(p.request().clone());
            p.approve().unwrap();
        });
        let mut call = ToolCall::new("send_it", json!({"payload": args})).metadata(meta);
        if let Some(id) = call_id {
            call = call.call_id(id);
        }
        rt().block_on(g.confirm(call)).unwrap();
        let req = seen.lock().unwrap().take().unwrap();
        let mut whole = serde_json::to_value(&*req).unwrap();
        for key in ["id", "tool", "arguments", "display_arguments"] {
            prop_assert!(whole.as_object_mut().unwrap().remove(key).is_some(), "{key}");
        }
        prop_assert_eq!(serde_json::to_value(req.details()).unwrap(), whole);
    }

    #[test]
    fn responses_are_bound_to_id_tool_and_digest(args in arb_json(), other in arb_json(), tool_typo in "[a-z_]{1,12}") {
        let args = json!({"payload": args});
        let other = json!({"payload": other});
        rt().block_on(async {
            let g = Gate::builder().tool(Tool::builder("send_it").requires_approval().editable(true).build()).build().unwrap();
            let mut sub = g.subscribe();
            let call = g.confirm(ToolCall::new("send_it", args.clone()));
            let answer = async {
                let req = next_request(&mut sub).await;
                prop_assert_eq!(&req.arguments, &args);
                prop_assert_eq!(&req.arguments_digest, &display::arguments_digest(&args));
                prop_assert!(!req.display_arguments().chars().any(display::is_deceptive));
                if other != args {
                    let wrong = ConfirmationResponse { arguments_digest: Some(display::arguments_digest(&other)), ..ConfirmationResponse::approve(&req) };
                    prop_assert_eq!(g.respond(wrong).unwrap_err().kind(), ErrorKind::Mismatch);
                }
                if tool_typo != "send_it" {
                    let wrong = ConfirmationResponse { tool: Some(tool_typo.clone()), ..ConfirmationResponse::approve(&req) };
                    prop_assert_eq!(g.respond(wrong).unwrap_err().kind(), ErrorKind::Mismatch);
                }
                let wrong_id = ConfirmationResponse { id: uuid::Uuid::new_v4(), ..ConfirmationResponse::approve(&req) };
                prop_assert_eq!(g.respond(wrong_id).unwrap_err().kind(), ErrorKind::UnknownRequest);
                prop_assert_eq!(g.pending().len(), 1);
                g.respond(ConfirmationResponse::approve(&req)).unwrap();
                Ok(())
            };
            let (d, r) = tokio::join!(call, answer);
            r?;
            let d = d.unwrap();
            prop_assert_eq!(d.arguments(), Some(&args));
            Ok(())
        })?;
    }

    /// Any mix of gated, ungated and refused calls, answered in any order: results in the
    /// model's order, each with its own call id and its own answer, each executed at most once.
    #[test]
    fn batches_keep_order_and_execute_at_most_once(kinds in prop::collection::vec(0u8..4, 0..12), seed in any::<u64>()) {
        rt().block_on(async {
            let runs = Arc::new(AtomicUsize::new(0));
            let g = gate_with(Gate::builder(), runs.clone());
            let mut sub = g.subscribe();
            let calls: Vec<ToolCall> = kinds.iter().enumerate().map(|(i, k)| {
                let c = match k {
                    0 => ToolCall::new("read_file", json!({"path": format!("/{i}")})),
                    1 | 2 => del(&format!("/{i}")),      // gated: approved when 1, denied when 2
                    _ => ToolCall::new("missing", json!({})),
                };
                c.call_id(format!("call-{i}"))
            }).collect();
            let gated = kinds.iter().filter(|k| matches!(k, 1 | 2)).count();
            let batch = g.execute_batch(calls);
            let answer = async {
                let mut reqs = Vec::new();
                for _ in 0..gated {
                    reqs.push(next_request(&mut sub).await);
                }
                // Deterministic shuffle from the seed.
                let mut s = seed;
                for i in (1..reqs.len()).rev() {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    reqs.swap(i, (s >> 33) as usize % (i + 1));
                }
                for r in reqs {
                    let i: usize = r.tool_call_id.as_ref().unwrap()[5..].parse().unwrap();
                    if kinds[i] == 1 { g.respond(ConfirmationResponse::approve(&r)).unwrap(); }
                    else { g.respond(ConfirmationResponse::deny(&r, Some(format!("deny {i}")))).unwrap(); }
                }
            };
            let (results, ()) = tokio::join!(batch, answer);
            prop_assert_eq!(results.len(), kinds.len());
            for (i, (r, k)) in results.iter().zip(&kinds).enumerate() {
                prop_assert_eq!(r.call_id.clone(), Some(format!("call-{i}")));
                let expected = match k { 0 | 1 => ToolStatus::Executed, 2 => ToolStatus::Denied, _ => ToolStatus::Rejected };
                prop_assert_eq!(r.status, expected);
                if *k == 2 { let want = format!("deny {i}"); prop_assert!(r.content.contains(&want), "{}", r.content); }
                if *k == 1 { prop_assert_eq!(r.output.clone(), Some(json!({"deleted": format!("/{i}")}))); }
            }
            prop_assert_eq!(runs.load(Ordering::SeqCst), kinds.iter().filter(|k| **k == 1).count());
            Ok(())
        })?;
    }

    /// Arbitrary bytes as a response never panic, and are `malformed` unless they happen to be
    /// a well-formed response.
    #[test]
    fn arbitrary_response_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let g = Gate::new();
        let text = String::from_utf8_lossy(&bytes);
        let e = g.respond_json(&text).unwrap_err();
        prop_assert!(matches!(e.kind(), ErrorKind::Malformed | ErrorKind::UnknownRequest));
    }

    /// Arbitrary JSON as tool arguments or tool specs never panics.
    #[test]
    fn arbitrary_inputs_never_panic(args in arb_json(), spec in arb_json()) {
        let g = gate();
        rt().block_on(async {
            let _ = g.confirm(ToolCall::new("read_file", args.clone())).await;
            let _ = g.evaluate(&ToolCall::new("write_file", args.clone()));
        });
        if let Ok(s) = ToolSpec::from_json(spec) { let _ = g.register_spec(s); }
        let _ = ConfirmationResponse::from_json(args);
    }
}
