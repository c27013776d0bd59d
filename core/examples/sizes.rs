use serde_json::json;
fn main() {
    let g = signoff::Gate::builder().tool(signoff::Tool::builder("delete_file").build()).build().unwrap();
    let f = g.confirm(signoff::ToolCall::new("delete_file", json!({})));
    println!("confirm future: {}", std::mem::size_of_val(&f));
    println!("ConfirmationRequest: {}", std::mem::size_of::<signoff::ConfirmationRequest>());
    println!("Value: {}", std::mem::size_of::<serde_json::Value>());
    println!("ToolCall: {}", std::mem::size_of::<signoff::ToolCall>());
    println!("Sleep: {}", std::mem::size_of::<tokio::time::Sleep>());
    println!("Decision: {}", std::mem::size_of::<signoff::Decision>());
}
