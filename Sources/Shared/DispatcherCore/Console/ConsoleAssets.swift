/// The console's one stylesheet and one script, served from the binary under `/console/static/`.
/// The script is a file, never inline: the Content-Security-Policy allows scripts from the
/// console's own origin only.
enum ConsoleAssets {
    static let stylesheet = """
        :root { --bg: #f7f7f8; --fg: #1d1d1f; --muted: #6b6b73; --card: #fff; --line: #dcdce0; --accent: #3a5bd9;
                --ok: #1f8a4c; --bad: #c0392b; --warn: #b7791f; font-family: system-ui, sans-serif; color-scheme: light dark; }
        @media (prefers-color-scheme: dark) {
          :root { --bg: #141417; --fg: #ececf0; --muted: #9a9aa5; --card: #1e1e23; --line: #33333b; --accent: #8da2ff;
                  --ok: #4cc38a; --bad: #ff6b5e; --warn: #f0b44c; }
        }
        * { box-sizing: border-box; }
        body { margin: 0; background: var(--bg); color: var(--fg); font-size: 15px; line-height: 1.4; }
        a { color: var(--accent); }
        .bar { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; padding: .6rem 1rem; background: var(--card); border-bottom: 1px solid var(--line); }
        .brand { font-weight: 700; text-decoration: none; color: var(--fg); }
        nav { display: flex; flex-wrap: wrap; gap: .2rem .8rem; flex: 1; }
        nav a { text-decoration: none; }
        .who { display: flex; gap: .5rem; align-items: center; }
        .token { color: var(--muted); }
        main { padding: 1rem; max-width: 1200px; margin: 0 auto; }
        h1 { font-size: 1.4rem; margin: .2rem 0 1rem; } h2 { font-size: 1.1rem; margin-top: 1.5rem; }
        .card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: .8rem 1rem; margin: 0 0 1rem; }
        .login { max-width: 28rem; display: grid; gap: .7rem; }
        .filters { display: flex; flex-wrap: wrap; gap: .6rem 1rem; align-items: end; }
        label { display: grid; gap: .2rem; font-size: .85rem; color: var(--muted); }
        .inline label { display: inline-grid; }
        input, select, button { font: inherit; padding: .35rem .5rem; border-radius: 6px; border: 1px solid var(--line); background: var(--bg); color: var(--fg); }
        button, .button { cursor: pointer; background: var(--accent); color: #fff; border: 0; text-decoration: none; padding: .4rem .8rem; border-radius: 6px; display: inline-block; }
        button.danger { background: var(--bad); }
        .scroll { overflow-x: auto; background: var(--card); border: 1px solid var(--line); border-radius: 8px; }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; padding: .4rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
        th { font-size: .8rem; color: var(--muted); font-weight: 600; white-space: nowrap; }
        tr.silent td { color: var(--muted); }
        pre { white-space: pre-wrap; word-break: break-word; background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: .6rem; margin: 0; }
        pre.sample { max-height: 8rem; overflow: auto; font-size: .8rem; }
        .hint { color: var(--muted); font-size: .85rem; }
        .notice { background: var(--card); border-left: 4px solid var(--accent); padding: .5rem .8rem; }
        .badge { font-size: .75rem; padding: .1rem .4rem; border-radius: 4px; border: 1px solid currentColor; }
        .ok { color: var(--ok); } .bad { color: var(--bad); } .warn { color: var(--warn); }
        .state.completed, .state.complete { color: var(--ok); } .state.dead, .state.failed { color: var(--bad); } .state.running, .state.processing { color: var(--accent); } .state.waiting { font-style: italic; }
        .actions { display: flex; flex-wrap: wrap; gap: .4rem; margin: .5rem 0; }
        .actions form { margin: 0; }
        dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; margin: 0 0 1rem; }
        dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; word-break: break-all; }
        ul.ledger { margin: 0; padding-left: 1rem; }
        .chart svg { width: 100%; height: 140px; background: var(--card); border: 1px solid var(--line); border-radius: 8px; }
        .chart .ok { fill: var(--ok); } .chart .bad { fill: var(--bad); }
        .chart figcaption { font-size: .8rem; color: var(--muted); }
        .key { display: inline-block; width: .8em; height: .8em; border-radius: 2px; }
        .key.ok { background: var(--ok); } .key.bad { background: var(--bad); }
        figure { margin: 1rem 0; }
        @media (max-width: 640px) { body { font-size: 14px; } main { padding: .6rem; } th, td { padding: .3rem .4rem; } }
        """

    /// Refreshes every element that names a `data-live` fragment every 2 s, without reloading
    /// the page; a refresh answered 401 (the session ended) reloads once, to the login page.
    static let script = """
        'use strict';
        document.addEventListener('DOMContentLoaded', function () {
          document.querySelectorAll('[data-live]').forEach(function (element) {
            var url = element.getAttribute('data-live');
            var busy = false;
            setInterval(function () {
              if (busy) { return; }
              busy = true;
              fetch(url, { credentials: 'same-origin', cache: 'no-store' })
                .then(function (response) {
                  if (response.status === 401) { window.location.reload(); return null; }
                  return response.ok ? response.text() : null;
                })
                .then(function (html) {
                  if (html !== null) { element.innerHTML = html; element.setAttribute('data-refreshed', String(Date.now())); }
                })
                .catch(function () {})
                .then(function () { busy = false; });
            }, 2000);
          });
        });
        """
}
