use serde_json::json;
use signoff::{ApprovalMode, ConfirmationResponse, Event, Gate, Tool, ToolCall, ToolStatus};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let gate = Gate::new();
    gate.register(
        Tool::builder("delete_file")
            .description("Deletes a file")
            // Dangerous: always ask, whatever its name (the default policy would ask here too, for
            // "delete"; it does not know every dangerous name: README's "What the default gates").
            .approval(ApprovalMode::Required)
            .parameters(json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
            .editable(true)
            .executor(|args| async move { Ok(json!(format!("deleted {}", args["path"]))) })
            .build(),
    )
    .unwrap();

    // Your UI: show each request to a person and send back their answer. Here: deny, with a reason.
    let mut events = gate.subscribe();
    let ui = gate.clone();
    tokio::spawn(async move {
        while let Some(Ok(event)) = events.recv().await {
            if let Event::ConfirmationRequest(req) = event {
                println!("asked: {}\n{}", req.prompt, req.display_arguments());
                ui.respond(ConfirmationResponse::deny(&req, Some("not my thesis".into()))).unwrap();
            }
        }
    });

    // Your agent loop: the model asked for this call.
    let result = gate.execute(ToolCall::new("delete_file", json!({"path": "thesis.tex"})).call_id("call_1")).await;
    assert_eq!(result.status, ToolStatus::Denied);
    // `result.content` is what you hand back to the model:
    println!("the model reads: {}", result.content);
}
