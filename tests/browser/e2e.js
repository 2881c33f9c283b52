#!/usr/bin/env node
// End-to-end test of the account site in a real browser: Debian's headless
// Chromium driven by playwright-core. Starts the real eventd on a free
// loopback port with a fresh data directory, then as a person would:
// registers, signs out, signs in, issues an API key, reads it from
// #api-key, creates a theme with it on /v2 (200), revokes it on the page and
// sees the next /v2 call fail (401). Screenshots of each page go to the
// screenshot directory; a phone-sized viewport must not scroll sideways.
//
//   node e2e.js EVENTD_BIN SCREENSHOT_DIR
//
// A missing Chromium or playwright-core is a failure, not a skip: run
// deps/install.sh (it installs both). Loopback only; every wait is bounded.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const http = require('http');
const { spawn } = require('child_process');

const CHROMIUM = '/usr/bin/chromium';
const PASSWORD = 'correct horse battery';
const NEW_PASSWORD = 'a brand new passphrase'; // after the password change (desktop)
const PHONE = { width: 390, height: 844 };
const WATCHDOG_MS = 150000;
const STEP_MS = 15000;

const bin = path.resolve(process.argv[2] || process.env.EVENTD_BIN ||
    path.join(__dirname, '..', '..', 'build', 'eventd'));
const shots = path.resolve(process.argv[3] || process.env.EVENTD_SCREENSHOTS ||
    path.join(__dirname, '..', '..', 'build', 'browser-screenshots'));

let passed = 0;
let failed = 0;
const failures = [];

function check(ok, what, detail) {
    if (ok) {
        passed++;
        console.log('ok   ' + what);
    } else {
        failed++;
        failures.push(what);
        console.log('FAIL ' + what + (detail !== undefined ? ': ' + detail : ''));
    }
    return ok;
}

// A check that later steps depend on: stops the run when it fails.
function must(ok, what, detail) {
    if (!check(ok, what, detail)) throw new Error('stopped after: ' + what);
}

function fatal(msg) {
    console.error('browser e2e: ' + msg);
    console.log('0 passed, 1 failed');
    process.exit(1);
}

let chromium;
try {
    ({ chromium } = require('playwright-core'));
} catch (e) {
    fatal('playwright-core is not installed in ' + path.join(__dirname, 'node_modules') +
          ' (' + e.code + '): run deps/install.sh, which runs tests/browser/install.sh');
}
if (!fs.existsSync(CHROMIUM)) {
    fatal(CHROMIUM + ' is missing: run deps/install.sh (Debian package chromium)');
}
if (!fs.existsSync(bin)) fatal('eventd binary not found: ' + bin);

// Starts eventd and resolves with { proc, port, dir } once it logs its port.
function startServer() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'eventd-browser-'));
    const env = Object.fromEntries(Object.entries(process.env)
        .filter(([k]) => !k.startsWith('EVENTD_')));
    const proc = spawn(bin, ['serve', '--listen', '127.0.0.1:0', '--data', dir,
        '--no-demo-user'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('eventd did not log its port ' +
            'within 10 s:\n' + log)), 10000);
        const onData = (chunk) => {
            log += chunk.toString();
            const m = /listening on 127\.0\.0\.1:(\d+)/.exec(log);
            if (m) {
                clearTimeout(timer);
                resolve({ proc, port: Number(m[1]), dir, log: () => log });
            }
        };
        proc.stderr.on('data', onData);
        proc.stdout.on('data', (c) => { log += c.toString(); });
        proc.on('error', (e) => { clearTimeout(timer); reject(e); });
        proc.on('exit', (code) => {
            clearTimeout(timer);
            reject(new Error('eventd exited (' + code + ') before listening:\n' + log));
        });
    });
}

function stopServer(srv) {
    return new Promise((resolve) => {
        if (!srv || srv.proc.exitCode !== null) return resolve();
        const t = setTimeout(() => { srv.proc.kill('SIGKILL'); }, 10000);
        srv.proc.once('exit', () => { clearTimeout(t); resolve(); });
        srv.proc.kill('SIGTERM');
    });
}

// POST /v2/theme with Basic auth from node's own http; resolves with the status.
function createTheme(port, user, key) {
    const body = JSON.stringify({ Theme: { Name: 'from the browser test' } });
    return new Promise((resolve, reject) => {
        const req = http.request({
            host: '127.0.0.1', port, method: 'POST', path: '/v2/theme', timeout: 5000,
            auth: user + ':' + key,
            headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
        }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); });
        req.on('timeout', () => req.destroy(new Error('POST /v2/theme timed out')));
        req.on('error', reject);
        req.end(body);
    });
}

async function shot(page, name) {
    const file = path.join(shots, name + '.png');
    await page.screenshot({ path: file, fullPage: true });
    console.log('     screenshot ' + file);
}

// Submits the form whose action ends with suffix and waits for the next page.
async function submit(page, suffix) {
    await Promise.all([
        page.waitForNavigation({ timeout: STEP_MS }),
        page.click('form[action$="' + suffix + '"] button[type="submit"], ' +
                   'form[action$="' + suffix + '"] input[type="submit"], ' +
                   'form[action$="' + suffix + '"] button:not([type])'),
    ]);
}

function pathOf(page) {
    return new URL(page.url()).pathname;
}

async function noSideScroll(page, what) {
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    check(w <= PHONE.width, what + ': no horizontal scroll on a ' + PHONE.width + ' px phone',
        'scrollWidth ' + w);
}

// Watches a page for anything from outside the server and for script errors.
function watch(page, base, problems) {
    page.on('request', (r) => {
        const u = r.url();
        if (!u.startsWith(base) && !u.startsWith('data:')) problems.push('external request ' + u);
    });
    page.on('pageerror', (e) => problems.push('page error ' + e.message));
    page.on('console', (m) => {
        if (m.type() === 'error') problems.push('console error ' + m.text());
    });
}

async function desktop(browser, base, port, name) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    page.setDefaultTimeout(STEP_MS);
    const problems = [];
    watch(page, base, problems);

    const reg = await page.goto(base + '/register');
    must(reg.status() === 200, 'GET /register is 200', reg.status());
    await shot(page, '1-register');
    await page.fill('input[name="username"]', name);
    await page.fill('input[name="password"]', PASSWORD);
    await page.fill('input[name="password_confirm"]', PASSWORD);
    await submit(page, '/register');
    must(pathOf(page) === '/user/api', 'registering lands on /user/api', page.url());
    check((await page.textContent('body')).includes(name), '/user/api shows the username');
    await shot(page, '2-user-api');

    await submit(page, '/signout');
    must(pathOf(page) === '/signin', 'signing out lands on /signin', page.url());
    await shot(page, '3-signin');
    const back = await page.goto(base + '/user/api');
    check(pathOf(page) === '/signin', 'after sign-out /user/api sends to /signin',
        page.url() + ' ' + back.status());

    await page.fill('input[name="username"]', name);
    await page.fill('input[name="password"]', PASSWORD);
    await submit(page, '/signin');
    must(pathOf(page) === '/user/api', 'signing in lands on /user/api', page.url());

    await submit(page, '/user/api/key');
    const key = ((await page.textContent('#api-key')) || '').trim();
    must(key.length >= 16, 'a new key is shown in #api-key', JSON.stringify(key));
    check(await page.isVisible('#copy, button:has-text("Copy")'), 'a copy button is shown');
    await shot(page, '4-user-api-key');
    let status = await createTheme(port, name, key);
    check(status === 200, 'POST /v2/theme with the key from the page is 200', status);

    await submit(page, '/user/api/revoke');
    must(pathOf(page) === '/user/api', 'revoking lands on /user/api', page.url());
    check(!(await page.textContent('body')).includes(key), 'the revoked key is not shown again');
    await shot(page, '5-after-revoke');
    status = await createTheme(port, name, key);
    check(status === 401, 'POST /v2/theme with the revoked key is 401', status);

    // The password change (the browser sends Origin and Sec-Fetch-Site: the
    // server's check must let its own pages through), then sign out everywhere.
    await page.click('a[href$="/user/password"]');
    must(pathOf(page) === '/user/password', 'the link opens /user/password', page.url());
    await shot(page, '6-password');
    await page.fill('input[name="current_password"]', PASSWORD);
    await page.fill('input[name="password"]', NEW_PASSWORD);
    await page.fill('input[name="password_confirm"]', NEW_PASSWORD);
    await submit(page, '/user/password');
    must(pathOf(page) === '/user/api', 'changing the password lands on /user/api', page.url());
    await submit(page, '/signout/all');
    must(pathOf(page) === '/signin', 'signing out everywhere lands on /signin', page.url());
    await page.fill('input[name="username"]', name);
    await page.fill('input[name="password"]', NEW_PASSWORD);
    await submit(page, '/signin');
    check(pathOf(page) === '/user/api', 'the new password signs in', page.url());

    check(problems.length === 0, 'no external requests, script or CSP errors',
        problems.join('; '));
    await context.close();
}

async function phone(browser, base, name) {
    const context = await browser.newContext({ viewport: PHONE, isMobile: true,
        hasTouch: true, deviceScaleFactor: 2 });
    const page = await context.newPage();
    page.setDefaultTimeout(STEP_MS);
    await page.goto(base + '/register');
    await noSideScroll(page, '/register');
    await shot(page, 'phone-register');
    await page.goto(base + '/signin');
    await noSideScroll(page, '/signin');
    await shot(page, 'phone-signin');
    await page.fill('input[name="username"]', name);
    await page.fill('input[name="password"]', NEW_PASSWORD);
    await submit(page, '/signin');
    must(pathOf(page) === '/user/api', 'phone: signing in lands on /user/api', page.url());
    await submit(page, '/user/api/key');
    await noSideScroll(page, '/user/api with a key and its curl line');
    await shot(page, 'phone-user-api-key');
    await context.close();
}

async function main() {
    fs.mkdirSync(shots, { recursive: true });
    const watchdog = setTimeout(() => fatal('did not finish within ' + WATCHDOG_MS + ' ms'),
        WATCHDOG_MS);
    let srv;
    let browser;
    try {
        srv = await startServer();
        const base = 'http://127.0.0.1:' + srv.port;
        console.log('     eventd on ' + base + ', data ' + srv.dir);
        browser = await chromium.launch({ executablePath: CHROMIUM, headless: true,
            args: ['--no-sandbox', '--disable-dev-shm-usage'] });
        const name = 'browser-' + process.pid;
        await desktop(browser, base, srv.port, name);
        await phone(browser, base, name);
    } catch (e) {
        if (!String(e && e.message).startsWith('stopped after'))
            check(false, 'the run completed', e && e.stack ? e.stack : String(e));
        if (srv) console.log('eventd log:\n' + srv.log());
    } finally {
        if (browser) await browser.close().catch(() => {});
        await stopServer(srv);
        if (srv) fs.rmSync(srv.dir, { recursive: true, force: true });
        clearTimeout(watchdog);
    }
    if (failures.length) console.log('failed: ' + failures.join(' | '));
    console.log(passed + ' passed, ' + failed + ' failed');
    process.exit(failed ? 1 : 0);
}

main();
