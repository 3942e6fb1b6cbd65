// The interop scenario, run by sdk_v1.mjs and sdk_v2.mjs against `orchestrator serve` (issue 15).
//
// Each step is recorded as {ok, ...what was seen} or {ok: false, error, code}, so one broken step never
// hides the others; the report is printed as one JSON object on stdout and tests/test_interop_clients.py
// asserts on it. The upstream servers are tests/servers/basic.py, changing.py and features.py, served by
// the gateway as `basic`, `changing` and `features`.
//
// Scenarios (--scenario): `all` (the default) runs every step below; in full mode (--mode full: every tool
// listed and called directly) it stops after the bad-arguments call. `connect` only initializes and lists;
// `late` lists, then re-lists after each list_changed until a slow server's tools (names starting with --late)
// show, within LATE_WAIT_MS.
//
// An adapter hides the SDK's API differences:
//   connect()                  -> {protocolVersion, serverInfo, capabilities}
//   listTools()                -> [Tool]
//   callTool(name, args, opts) -> CallToolResult (opts.onprogress)
//   onToolsChanged(callback)   (before connect)     afterConnect() (e.g. open subscriptions/listen)
//   onLog(callback)            (before connect)     setLogLevel(level)
//   listResources(), readResource(uri), listPrompts(), getPrompt(name, args), close()

// stdout carries only the report: the SDKs' own console output (warnings) goes to stderr.
for (const level of ['log', 'info', 'warn', 'debug']) console[level] = (...parts) => console.error(...parts);

export const REQUEST_TIMEOUT_MS = 30_000;
// One request's bound: a tool call on a loaded 2-core machine answers in well under a second.
export const NOTIFICATION_WAIT_MS = 10_000;
// How long to wait for list_changed after the upstream change (measured 16-89 ms when it works).
export const LOG_WAIT_MS = 300;
// Log messages are sent before the tool's answer (on its stream); this only covers a relay that forwards them
// a little late, on the session's stream.
export const LATE_WAIT_MS = 30_000;
// The `late` scenario: how long to wait for a slow server's tools to be announced (its start is delayed ~8 s).
export const WATCHDOG_MS = 90_000;
// Whole-script bound: print what was seen so far and exit rather than hang the test.

export function parseArgs(argv) {
    const options = {
        scenario: 'all',
        mode: 'search',
        headers: {},
        added: 'added_tool',
        late: 'basic__',
        command: null,
        url: null,
        args: [],
    };
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        if (arg === '--url') options.url = argv[++i];
        else if (arg === '--header') {
            const [key, ...rest] = argv[++i].split(':');
            options.headers[key.trim()] = rest.join(':').trim();
        } else if (arg === '--mode') options.mode = argv[++i];
        else if (arg === '--added') options.added = argv[++i];
        else if (arg === '--scenario') options.scenario = argv[++i];
        else if (arg === '--late') options.late = argv[++i];
        else if (arg === '--') {
            options.command = argv[i + 1];
            options.args = argv.slice(i + 2);
            break;
        } else throw new Error(`unknown argument ${arg}`);
    }
    if (!options.url && !options.command) throw new Error('give --url URL or -- COMMAND ARGS...');
    return options;
}

/** Records the initialize result's protocol version and every notification method, by wrapping the
 * transport's `onmessage` (each handler the SDK installs is wrapped once; it may chain to the previous one,
 * so each message is recorded once). */
export function sniff(transport, seen) {
    const recorded = new WeakSet();
    let wrapped;
    Object.defineProperty(transport, 'onmessage', {
        configurable: true,
        set(handler) {
            wrapped = (message, extra) => {
                if (message && typeof message === 'object' && !recorded.has(message)) {
                    recorded.add(message);
                    if (message.result?.protocolVersion) seen.initializeVersion = message.result.protocolVersion;
                    if (message.method && message.id === undefined) seen.notifications.push(message.method);
                }
                return handler?.(message, extra);
            };
        },
        get() {
            return wrapped;
        },
    });
}

function payload(result) {
    if (result?.structuredContent) return result.structuredContent;
    const text = (result?.content ?? []).filter(block => block.type === 'text').map(block => block.text).join('\n');
    try {
        return JSON.parse(text);
    } catch {
        return text;
    }
}

function texts(result) {
    return (result?.content ?? []).filter(block => block.type === 'text').map(block => block.text).join('\n');
}

function failure(error) {
    return { ok: false, error: String(error?.message ?? error), code: error?.code ?? null };
}

async function step(report, name, body) {
    const started = performance.now();
    try {
        report[name] = { ok: true, ...(await body()) };
    } catch (error) {
        report[name] = failure(error);
    }
    report[name].ms = Math.round(performance.now() - started);
}

function waitFor(predicate, timeoutMs) {
    return new Promise(resolve => {
        const started = performance.now();
        const timer = setInterval(() => {
            if (predicate() || performance.now() - started > timeoutMs) {
                clearInterval(timer);
                resolve(predicate());
            }
        }, 5);
    });
}

/** Calls `name` the way the mode offers it: directly (full) or through the `call_tool` meta-tool (search). */
function caller(adapter, mode) {
    return (name, args, opts) =>
        mode === 'full' ? adapter.callTool(name, args, opts) : adapter.callTool('call_tool', { name, arguments: args }, opts);
}

export async function runScenario(adapter, options) {
    const report = { client: adapter.name, version: adapter.version, mode: options.mode, notifications: [] };
    const watchdog = setTimeout(() => {
        report.watchdog = `gave up after ${WATCHDOG_MS} ms`;
        process.stdout.write(JSON.stringify(report) + '\n');
        process.exit(2);
    }, WATCHDOG_MS);
    const changes = [];
    const logs = [];
    adapter.onToolsChanged(() => changes.push(performance.now()));
    adapter.onLog(params => logs.push(params));
    const call = caller(adapter, options.mode);

    await step(report, 'initialize', async () => ({ ...(await adapter.connect(report)), at_ms: Math.round(performance.now()) }));
    if (!report.initialize.ok) return finish(report, adapter, watchdog);
    await step(report, 'after_connect', async () => ({ ...(await adapter.afterConnect()) }));
    const listTools = async () => {
        const tools = await adapter.listTools();
        return {
            names: tools.map(tool => tool.name),
            output_schemas: tools.filter(tool => tool.outputSchema).map(tool => tool.name),
        };
    };
    await step(report, 'list_tools', listTools);
    if (options.scenario === 'connect') return finish(report, adapter, watchdog);
    if (options.scenario === 'late') {
        // A server whose start is delayed: are its tools missing at first, and announced once it is up? Other
        // servers may be announced first, so each change is followed by a new listing until the late ones show.
        const hasLate = names => names.some(name => name.startsWith(options.late));
        const deadline = performance.now() + LATE_WAIT_MS;
        let names = report.list_tools.names ?? [];
        let seen = 0;
        await step(report, 'late_change', async () => {
            while (!hasLate(names) && performance.now() < deadline) {
                if (!(await waitFor(() => changes.length > seen, deadline - performance.now()))) break;
                seen = changes.length;
                names = (await listTools()).names;
            }
            return { announced: hasLate(names), changes: seen, at_ms: Math.round(performance.now()), names };
        });
        return finish(report, adapter, watchdog);
    }

    if (options.mode === 'search') {
        await step(report, 'tool_search', async () => {
            const result = await adapter.callTool('tool_search', { query: 'add two integers' });
            const found = payload(result);
            return { is_error: !!result.isError, outcome: found.outcome, hits: (found.hits ?? []).map(hit => hit.name) };
        });
        await step(report, 'expand_tools', async () => {
            const result = await adapter.callTool('expand_tools', { names: ['basic__add'] });
            const tools = payload(result).tools ?? [];
            return {
                is_error: !!result.isError,
                names: tools.map(tool => tool.name),
                properties: tools.map(tool => Object.keys(tool.input_schema?.properties ?? {})),
            };
        });
    }
    await step(report, 'call_tool', async () => {
        const result = await call('basic__add', { a: 2, b: 3 });
        return { is_error: !!result.isError, text: texts(result), structured: result.structuredContent ?? null };
    });
    await step(report, 'bad_arguments', async () => {
        const result = await call('basic__add', { a: 'two' });
        return { is_error: !!result.isError, text: texts(result), structured: result.structuredContent ?? null };
    });
    if (options.mode === 'full') return finish(report, adapter, watchdog);

    await step(report, 'list_changed', async () => {
        const before = changes.length;
        const started = performance.now();
        const result = await call('changing__add_tool', { name: options.added });
        const arrived = await waitFor(() => changes.length > before, NOTIFICATION_WAIT_MS);
        // Search after each notification until the tool is found or the wait is over: on a loaded machine
        // another server that connects late can announce its own change first, and a client that
        // searches on that one is simply early, as a real agent would be.
        const wanted = `changing__${options.added}`;
        let searchable = false;
        let searches = 0;
        while (arrived) {
            const heard = changes.length;
            const search = payload(await adapter.callTool('tool_search', { query: options.added }));
            searches += 1;
            searchable = (search.hits ?? []).map(hit => hit.name).includes(wanted);
            if (searchable || performance.now() - started > NOTIFICATION_WAIT_MS) break;
            await waitFor(() => changes.length > heard, NOTIFICATION_WAIT_MS - (performance.now() - started));
        }
        return {
            call_is_error: !!result.isError,
            notified: arrived,
            after_ms: arrived ? Math.round(changes[before] - started) : null,
            notifications: changes.length - before,
            searches,
            searchable,
        };
    });
    await step(report, 'progress', async () => {
        const seen = [];
        const result = await call('features__count', { steps: 3 }, { onprogress: progress => seen.push(progress) });
        return { is_error: !!result.isError, text: texts(result), progress: seen };
    });
    await step(report, 'log', async () => {
        const capability = !!report.initialize.capabilities?.logging;
        let setLevel = null;
        if (capability) {
            try {
                await adapter.setLogLevel('debug');
                setLevel = 'ok';
            } catch (error) {
                setLevel = String(error?.message ?? error);
            }
        }
        const marker = `interop-log-${adapter.name}`;
        const result = await call('features__note', { text: marker });
        await waitFor(() => logs.some(entry => JSON.stringify(entry.data ?? '').includes(marker)), LOG_WAIT_MS);
        return {
            capability,
            set_level: setLevel,
            is_error: !!result.isError,
            messages: logs.filter(entry => JSON.stringify(entry.data ?? '').includes(marker)).map(entry => entry.data),
        };
    });
    await step(report, 'resource_link', async () => {
        const result = await call('features__link', { name: 'hello' });
        const link = (result.content ?? []).find(block => block.type === 'resource_link');
        if (!link) return { ok: false, error: `no resource_link in ${JSON.stringify(result.content)}`, is_error: !!result.isError };
        const read = await adapter.readResource(link.uri);
        return { uri: link.uri, contents: (read.contents ?? []).map(item => item.text ?? null) };
    });
    await step(report, 'resources', async () => {
        const resources = await adapter.listResources();
        return { uris: resources.map(resource => resource.uri), names: resources.map(resource => resource.name) };
    });
    await step(report, 'prompts', async () => {
        const prompts = await adapter.listPrompts();
        const names = prompts.map(prompt => prompt.name);
        const greeting = names.find(name => name.endsWith('greeting'));
        if (!greeting) return { ok: false, error: `no greeting prompt in ${JSON.stringify(names)}`, names };
        const got = await adapter.getPrompt(greeting, { name: 'Ada' });
        return { names, messages: (got.messages ?? []).map(message => message.content?.text ?? null) };
    });
    return finish(report, adapter, watchdog);
}

async function finish(report, adapter, watchdog) {
    try {
        await adapter.close();
    } catch (error) {
        report.close_error = String(error?.message ?? error);
    }
    clearTimeout(watchdog);
    process.stdout.write(JSON.stringify(report) + '\n');
    process.exit(0);
}
