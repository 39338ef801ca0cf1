// The official OpenAI Node SDK pointed at the gateway, the way an existing
// application would be. GATEWAY_URL names a running gateway (make test-sdk
// starts one with simulated providers).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = (process.env.GATEWAY_URL ?? "http://127.0.0.1:8080") + "/v1";
const client = new OpenAI({ baseURL, apiKey: "unused-by-production_app", maxRetries: 0, timeout: 20_000 });

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
    },
  },
};

test("chat completion", async () => {
  const r = await client.chat.completions.create({
    model: "auto",
    messages: [{ role: "system", content: "be brief" }, { role: "user", content: "what is a circuit breaker" }],
  });
  assert.equal(r.object, "chat.completion");
  assert.match(r.choices[0].message.content, /circuit breaker/);
  assert.ok(r.usage.total_tokens > 0);
});

test("streaming: one model in every chunk, usage when asked", async () => {
  const stream = await client.chat.completions.create({
    model: "auto", stream: true, stream_options: { include_usage: true },
    messages: [{ role: "user", content: "hello there" }],
  });
  const models = new Set();
  let text = "", usage = null;
  for await (const chunk of stream) {
    models.add(chunk.model);
    text += chunk.choices[0]?.delta?.content ?? "";
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(models.size, 1, `chunks named ${[...models]}`);
  assert.match(text, /hello there/);
  assert.ok(usage && usage.total_tokens > 0);
});

test("tool round trip", async () => {
  const messages = [{ role: "user", content: "weather in Oslo?" }];
  const first = await client.chat.completions.create({ model: "auto", messages, tools: [weather] });
  const call = first.choices[0].message.tool_calls?.[0];
  assert.equal(first.choices[0].finish_reason, "tool_calls");
  assert.equal(call.function.name, "get_weather");
  const args = JSON.parse(call.function.arguments);
  assert.ok("city" in args && args.unit === "celsius");
  messages.push(first.choices[0].message, { role: "tool", tool_call_id: call.id, content: '{"temp": 3}' });
  const second = await client.chat.completions.create({ model: "auto", messages, tools: [weather] });
  assert.equal(second.choices[0].finish_reason, "stop");
  assert.ok(second.choices[0].message.content.length > 0);
});

test("response_format json_schema", async () => {
  const r = await client.chat.completions.create({
    model: "auto",
    messages: [{ role: "user", content: "lunch with Bo on Friday" }],
    response_format: {
      type: "json_schema",
      json_schema: { name: "event", strict: true, schema: { type: "object", properties: { title: { type: "string" }, hour: { type: "integer" } }, required: ["title", "hour"] } },
    },
  });
  const event = JSON.parse(r.choices[0].message.content);
  assert.equal(typeof event.title, "string");
  assert.equal(typeof event.hour, "number");
});

test("errors are OpenAI errors", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }),
    (err) => err instanceof OpenAI.NotFoundError && err.code === "model_not_found",
  );
});
