// The official TypeScript SDK v1 client (@modelcontextprotocol/sdk) running the interop scenario.
//
//   node sdk_v1.mjs --url http://127.0.0.1:PORT/mcp [--header 'Authorization: Bearer T'] [--mode search|full] [--added NAME]
//   node sdk_v1.mjs [--mode ...] -- orchestrator --config bernstein.yaml serve --transport stdio
//
// Prints one JSON report (see scenario.mjs).

import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { REQUEST_TIMEOUT_MS, parseArgs, runScenario, sniff } from './scenario.mjs';

const VERSION = JSON.parse(readFileSync(new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url))).version;
const options = parseArgs(process.argv.slice(2));
const client = new Client({ name: 'interop-sdk-v1', version: VERSION });
const transport = options.url
    ? new StreamableHTTPClientTransport(new URL(options.url), { requestInit: { headers: options.headers } })
    : new StdioClientTransport({ command: options.command, args: options.args, env: process.env, stderr: 'inherit' });
const request = { timeout: REQUEST_TIMEOUT_MS };

const adapter = {
    name: 'sdk-v1',
    version: VERSION,
    async connect(report) {
        const seen = { notifications: report.notifications, initializeVersion: null };
        sniff(transport, seen);
        await client.connect(transport, request);
        return {
            protocolVersion: seen.initializeVersion,
            serverInfo: client.getServerVersion() ?? null,
            capabilities: client.getServerCapabilities() ?? null,
        };
    },
    async afterConnect() {
        return {};
    },
    async listTools() {
        return (await client.listTools({}, request)).tools;
    },
    async callTool(name, args, opts = {}) {
        return client.callTool({ name, arguments: args }, undefined, { ...request, ...opts });
    },
    onToolsChanged(callback) {
        client.setNotificationHandler(ToolListChangedNotificationSchema, callback);
    },
    onLog(callback) {
        client.setNotificationHandler(LoggingMessageNotificationSchema, notification => callback(notification.params));
    },
    async setLogLevel(level) {
        await client.setLoggingLevel(level, request);
    },
    async listResources() {
        return (await client.listResources({}, request)).resources;
    },
    async readResource(uri) {
        return client.readResource({ uri }, request);
    },
    async listPrompts() {
        return (await client.listPrompts({}, request)).prompts;
    },
    async getPrompt(name, args) {
        return client.getPrompt({ name, arguments: args }, request);
    },
    async close() {
        await client.close();
    },
};

await runScenario(adapter, options);
