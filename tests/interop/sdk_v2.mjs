// The official TypeScript SDK v2 client (@modelcontextprotocol/client) running the interop scenario.
//
//   node sdk_v2.mjs --url http://127.0.0.1:PORT/mcp [--header 'Authorization: Bearer T'] [--mode search|full] [--added NAME]
//   node sdk_v2.mjs [--mode ...] -- orchestrator --config bernstein.yaml serve --transport stdio
//
// Version negotiation: `auto` over HTTP (probes `server/discover` on the connection, so the result is what
// a v2 client that opts in negotiates); pinned to 2026-07-28 over stdio, because `auto` on the SDK's stdio
// transport probes on a second copy of the server process, which would start a second gateway with all
// its servers. A modern connection hears of tool-list changes on a `subscriptions/listen` stream.
// Prints one JSON report (see scenario.mjs).

import { readFileSync } from 'node:fs';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { REQUEST_TIMEOUT_MS, parseArgs, runScenario, sniff } from './scenario.mjs';

const MODERN = '2026-07-28';
const VERSION = JSON.parse(readFileSync(new URL('./node_modules/@modelcontextprotocol/client/package.json', import.meta.url))).version;
const options = parseArgs(process.argv.slice(2));
const client = new Client(
    { name: 'interop-sdk-v2', version: VERSION },
    { versionNegotiation: { mode: options.url ? 'auto' : { pin: MODERN } } },
);
const transport = options.url
    ? new StreamableHTTPClientTransport(new URL(options.url), { requestInit: { headers: options.headers } })
    : new StdioClientTransport({ command: options.command, args: options.args, env: process.env, stderr: 'inherit' });
const request = { timeout: REQUEST_TIMEOUT_MS };
let subscription = null;

const adapter = {
    name: 'sdk-v2',
    version: VERSION,
    async connect(report) {
        const seen = { notifications: report.notifications, initializeVersion: null };
        sniff(transport, seen);
        await client.connect(transport, request);
        return {
            protocolVersion: client.getNegotiatedProtocolVersion() ?? seen.initializeVersion,
            era: client.getProtocolEra() ?? null,
            serverInfo: client.getServerVersion() ?? null,
            capabilities: client.getServerCapabilities() ?? null,
        };
    },
    async afterConnect() {
        if (client.getProtocolEra() !== 'modern') return { listen: 'legacy era: notifications/tools/list_changed' };
        subscription = await client.listen({ toolsListChanged: true }, request);
        return { listen: subscription.honoredFilter };
    },
    async listTools() {
        return (await client.listTools(undefined, { ...request, cacheMode: 'bypass' })).tools;
    },
    async callTool(name, args, opts = {}) {
        return client.callTool({ name, arguments: args }, { ...request, ...opts });
    },
    onToolsChanged(callback) {
        client.setNotificationHandler('notifications/tools/list_changed', callback);
    },
    onLog(callback) {
        client.setNotificationHandler('notifications/message', notification => callback(notification.params));
    },
    async setLogLevel(level) {
        await client.setLoggingLevel(level, request);
    },
    async listResources() {
        return (await client.listResources(undefined, { ...request, cacheMode: 'bypass' })).resources;
    },
    async readResource(uri) {
        return client.readResource({ uri }, { ...request, cacheMode: 'bypass' });
    },
    async listPrompts() {
        return (await client.listPrompts(undefined, { ...request, cacheMode: 'bypass' })).prompts;
    },
    async getPrompt(name, args) {
        return client.getPrompt({ name, arguments: args }, request);
    },
    async close() {
        if (subscription) await subscription.close();
        await client.close();
    },
};

await runScenario(adapter, options);
