// A stdio MCP server in Node with no dependencies, for the MCP host's tests: its one tool
// starts an HTTP server on the child's own loopback and reads it back with fetch(), the
// call most npm servers that wrap an API make (undici compiles its parser to WebAssembly).
import http from "node:http";
import readline from "node:readline";

const TOOL = {
  name: "fetch_loopback",
  description: "Serve a word on the child's loopback and read it back with fetch().",
  inputSchema: { type: "object", properties: { word: { type: "string" } }, required: ["word"] },
};

function send(message) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
}

async function fetchLoopback(word) {
  const server = http.createServer((_request, response) => response.end(`served:${word}`));
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const response = await fetch(`http://127.0.0.1:${server.address().port}/`);
    return await response.text();
  } finally {
    server.close();
  }
}

async function answer(request) {
  const { id, method, params } = request;
  if (id === undefined) return; // a notification
  if (method === "initialize") {
    send({ id, result: {
      protocolVersion: params?.protocolVersion ?? "2025-06-18",
      capabilities: { tools: {} },
      serverInfo: { name: "node-fetch-probe", version: "1" },
    } });
  } else if (method === "ping") {
    send({ id, result: {} });
  } else if (method === "tools/list") {
    send({ id, result: { tools: [TOOL] } });
  } else if (method === "tools/call" && params?.name === TOOL.name) {
    try {
      const text = await fetchLoopback(String(params.arguments?.word ?? ""));
      send({ id, result: { content: [{ type: "text", text }] } });
    } catch (error) {
      send({ id, result: { isError: true, content: [{ type: "text", text: `fetch failed: ${error}` }] } });
    }
  } else {
    send({ id, error: { code: -32601, message: `method not found: ${method}` } });
  }
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let request;
  try {
    request = JSON.parse(line);
  } catch {
    return;
  }
  answer(request);
});
