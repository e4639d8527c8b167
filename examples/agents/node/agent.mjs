// An agent written in Node.js, measured by BackIntel Bench from outside.
//
//   npm ci --prefix examples/agents/node
//   then --analyst "cmd:node examples/agents/node/agent.mjs" (see docs/agents.md)
//
// Its tools are the trial's MCP server (the official TypeScript SDK, Streamable HTTP, the
// trial's bearer token); its model is whatever the harness configured, reached through the
// harness's model gateway with the OpenAI Chat Completions API (OPENAI_BASE_URL and the
// trial's key as OPENAI_API_KEY). It answers by calling the submit_answer (or refuse) tool.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const env = process.env;
const transport = new StreamableHTTPClientTransport(new URL(env.BACKINTEL_MCP_URL), {
  requestInit: { headers: { Authorization: `Bearer ${env.BACKINTEL_MCP_TOKEN}` } },
});
const mcp = new Client({ name: "node-example-agent", version: "1.0.0" });
await mcp.connect(transport);

const { tools } = await mcp.listTools();
const offered = tools.map((t) => ({
  type: "function",
  function: { name: t.name, description: t.description ?? t.name, parameters: t.inputSchema },
}));

async function complete(messages) {
  const response = await fetch(`${env.OPENAI_BASE_URL}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${env.OPENAI_API_KEY}` },
    body: JSON.stringify({ model: env.AGENT_MODEL ?? "gpt-5.1", messages, tools: offered }),
  });
  if (!response.ok) throw new Error(`model: HTTP ${response.status}: ${await response.text()}`);
  return (await response.json()).choices[0].message;
}

const messages = [
  {
    role: "system",
    content:
      "You are a data analyst. Explore the store with the tools, compute the answer with SQL, " +
      "then call submit_answer once (or refuse, naming what the data lacks).\n\n" +
      (env.BACKINTEL_RULES ?? ""),
  },
  { role: "user", content: env.BACKINTEL_QUESTION },
];
for (let turn = 0; turn < 20; turn++) {
  const message = await complete(messages);
  messages.push(message);
  if (!message.tool_calls?.length) {
    console.log(message.content ?? "");
    break;
  }
  for (const call of message.tool_calls) {
    const result = await mcp.callTool({
      name: call.function.name,
      arguments: JSON.parse(call.function.arguments || "{}"),
    });
    const text = result.content.map((part) => part.text ?? "").join("");
    messages.push({ role: "tool", tool_call_id: call.id, content: text });
  }
}
await mcp.close();
