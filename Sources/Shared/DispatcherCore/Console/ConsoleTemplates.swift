import Mustache

/// The console's pages as mustache templates, kept in the binary (a dispatcher image carries no
/// resource folder). `{{value}}` escapes for HTML (`& < > " '`), so every value from a user or a
/// provider is shown as text; `{{{…}}}` is used only for HTML the console built itself (a page
/// inside the layout, the chart's SVG of numbers).
enum ConsoleTemplates {
    static let library: MustacheLibrary = {
        var templates: [String: MustacheTemplate] = [:]
        for (name, text) in sources {
            // The templates are constants of this file: one that does not parse is a bug caught by the first test.
            templates[name] = try! MustacheTemplate(string: text)
        }
        return MustacheLibrary(templates: templates)
    }()

    static func render(_ name: String, _ values: [String: Any]) -> String {
        library.render(present(values) ?? [:], withTemplate: name) ?? ""
    }

    /// The values without the absent ones: mustache would show an optional wrapped in `Any` as
    /// "nil" and count it as present in a `{{#section}}`.
    static func present(_ value: Any) -> Any? {
        let mirror = Mirror(reflecting: value)
        if mirror.displayStyle == .optional {
            guard let wrapped = mirror.children.first?.value else { return nil }
            return present(wrapped)
        }
        if let dictionary = value as? [String: Any] { return dictionary.compactMapValues(present) }
        if let array = value as? [[String: Any]] { return array.compactMap(present) }
        return value
    }

    private static let sources: [String: String] = [
        "layout": layout, "login": login, "message": message, "overview": overview, "overview-live": overviewLive, "jobs": jobs,
        "job": job, "job-live": jobLive, "dead": dead, "confirm": confirm, "queues": queues, "workers": workers, "schedule": schedule,
        "renders": renders, "audit": audit,
    ]

    private static let layout = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="color-scheme" content="light dark">
        <title>{{title}} · Wearbloom fleet</title>
        <link rel="stylesheet" href="/console/static/console.css">
        <script src="/console/static/console.js" defer></script>
        </head>
        <body>
        <header class="bar">
          <a class="brand" href="/console">Wearbloom fleet</a>
          {{#signedIn}}
          <nav>
            <a href="/console">Overview</a><a href="/console/jobs">Jobs</a><a href="/console/dead">Dead</a><a href="/console/queues">Queues</a><a href="/console/workers">Workers</a><a href="/console/schedule">Schedule</a><a href="/console/renders">Renders</a><a href="/console/audit">Audit</a>
          </nav>
          <form method="post" action="/console/logout" class="who">
            <input type="hidden" name="csrf" value="{{csrf}}">
            <span class="token">{{tokenName}} <em>({{role}})</em></span>
            <button type="submit">Log out</button>
          </form>
          {{/signedIn}}
        </header>
        <main>
        <h1>{{title}}</h1>
        {{#notice}}<p class="notice" id="notice">{{notice}}</p>{{/notice}}
        {{{body}}}
        </main>
        </body>
        </html>
        """

    private static let login = """
        <form method="post" action="/console/login" class="card login">
          <input type="hidden" name="csrf" value="{{loginCSRF}}">
          <label>Access token <input type="password" name="token" autocomplete="off" required autofocus></label>
          <p class="hint">A dispatcher token (<code>dispatcher access-token create --role read|operate</code>): <code>read</code> looks, <code>operate</code> acts.</p>
          <button type="submit">Log in</button>
        </form>
        """

    private static let message = """
        <p class="card">{{message}}</p>
        {{#back}}<p><a href="{{back}}">Back</a></p>{{/back}}
        """

    private static let overview = """
        <section id="overview-live" data-live="/console/live/overview">{{{live}}}</section>
        """

    private static let overviewLive = """
        <p class="hint">Refreshed every 2 s · {{serverTime}} · all counts exact; completed and dead in the last 60 minutes, the current one so far</p>
        {{#replica}}<p class="hint" id="replica-lag">Pages read from a replica: replay lag {{lag}}</p>{{/replica}}
        <p class="hint" id="snapshot-horizon">{{horizon}}</p>
        <div class="scroll"><table class="kinds">
          <thead><tr><th>Kind</th><th>Due</th><th>Running</th><th>Retrying</th><th>Scheduled</th><th>Waiting</th><th>Dead (1 h)</th><th>Completed (1 h)</th><th>Lag</th><th></th></tr></thead>
          <tbody>
          {{#kinds}}<tr data-kind="{{kind}}"><td><a href="/console/jobs?kind={{kind}}">{{kind}}</a></td><td>{{due}}</td><td>{{running}}</td><td>{{retrying}}</td><td>{{scheduled}}</td><td class="waiting">{{waiting}}</td><td>{{dead}}</td><td class="completed">{{completed}}</td><td>{{lag}}</td><td>{{#paused}}<span class="badge warn">paused</span>{{/paused}}</td></tr>{{/kinds}}
          {{^kinds}}<tr><td colspan="10">No jobs yet.</td></tr>{{/kinds}}
          </tbody>
        </table></div>
        <figure class="chart">{{{chart}}}<figcaption><span class="key ok"></span> completed <span class="key bad"></span> failed, per minute, last hour (max {{chartMax}})</figcaption></figure>
        <h2>Live workers</h2>
        <div class="scroll"><table>
          <thead><tr><th>Worker</th><th>Kinds</th><th>Running</th><th>Heartbeat</th></tr></thead>
          <tbody>
          {{#workers}}<tr><td>{{id}}</td><td>{{kinds}}</td><td>{{running}}</td><td>{{heartbeat}}</td></tr>{{/workers}}
          {{^workers}}<tr><td colspan="4">No live worker.</td></tr>{{/workers}}
          </tbody>
        </table></div>
        """

    private static let jobs = """
        <form method="get" action="/console/jobs" class="filters card">
          <label>State <select name="state"><option value="">any</option>{{#states}}<option value="{{name}}"{{#selected}} selected{{/selected}}>{{name}}</option>{{/states}}</select></label>
          <label>Kind <select name="kind"><option value="">any</option>{{#kinds}}<option value="{{name}}"{{#selected}} selected{{/selected}}>{{name}}</option>{{/kinds}}</select></label>
          <label>Queue <input name="queue" value="{{queue}}"></label>
          <label>Error code <input name="code" value="{{code}}"></label>
          <label>Created after <input name="createdAfter" value="{{createdAfter}}" placeholder="2026-11-25T08:00:00Z"></label>
          <label>Created before <input name="createdBefore" value="{{createdBefore}}"></label>
          <button type="submit">Filter</button>
        </form>
        <div class="scroll"><table>
          <thead><tr><th>Id</th><th>Kind</th><th>Queue</th><th>State</th><th>Attempt</th><th>Last error</th><th>Created</th></tr></thead>
          <tbody>
          {{#jobs}}<tr><td><a href="/console/jobs/{{id}}">{{id}}</a></td><td>{{kind}}</td><td>{{queue}}</td><td><span class="state {{state}}">{{state}}</span></td><td>{{attempt}}/{{maxAttempts}}</td><td>{{#code}}<code>{{code}}</code> {{/code}}{{error}}</td><td>{{createdAt}}</td></tr>{{/jobs}}
          {{^jobs}}<tr><td colspan="7">No job matches.</td></tr>{{/jobs}}
          </tbody>
        </table></div>
        {{#next}}<p><a class="button" href="{{next}}">Older →</a></p>{{/next}}
        """

    private static let job = """
        <section id="job-live" {{#live}}data-live="/console/live/jobs/{{id}}"{{/live}}>{{{jobLive}}}</section>
        <h2>Payload</h2>
        <pre class="payload">{{payload}}</pre>
        {{#result}}<h2>Result</h2><pre>{{result}}</pre>{{/result}}
        """

    private static let jobLive = """
        <dl class="facts">
          <dt>State</dt><dd><span class="state {{state}}" id="job-state">{{state}}</span>{{#cancelRequested}} (cancel requested){{/cancelRequested}}</dd>
          <dt>Kind</dt><dd>{{kind}}</dd><dt>Queue</dt><dd>{{queue}}</dd><dt>Priority</dt><dd>{{priority}}</dd>
          <dt>Attempt</dt><dd>{{attempt}} of {{maxAttempts}}</dd>
          <dt>Idempotency key</dt><dd>{{idempotencyKey}}</dd><dt>Worker</dt><dd>{{workerId}}</dd>
          <dt>Created</dt><dd>{{createdAt}}</dd><dt>Runs at</dt><dd>{{runAt}}</dd><dt>Started</dt><dd>{{startedAt}}</dd><dt>Finished</dt><dd>{{finishedAt}}</dd>
        </dl>
        {{#canOperate}}
        <div class="actions">
          {{#canRetry}}<form method="post" action="/console/jobs/{{id}}/retry"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit" id="retry">Retry</button></form>{{/canRetry}}
          {{#canDiscard}}<form method="post" action="/console/jobs/{{id}}/discard"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit" class="danger" id="discard">Discard</button></form>{{/canDiscard}}
          {{#canCancel}}<form method="post" action="/console/jobs/{{id}}/cancel"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit" class="danger" id="cancel">Cancel</button></form>{{/canCancel}}
        </div>
        {{/canOperate}}
        <h2>Attempts</h2>
        <div class="scroll"><table>
          <thead><tr><th>#</th><th>At</th><th>Code</th><th>Error</th><th>Worker</th></tr></thead>
          <tbody>
          {{#errors}}<tr><td>{{attempt}}</td><td>{{at}}</td><td><code>{{code}}</code></td><td class="error-text">{{error}}</td><td>{{worker}}</td></tr>{{/errors}}
          {{^errors}}<tr><td colspan="5">No failed attempt.</td></tr>{{/errors}}
          </tbody>
        </table></div>
        {{#duration}}<p class="hint">Last run: {{duration}}</p>{{/duration}}
        {{#hasAfter}}<h2>Runs after</h2>
        {{#waitingOn}}<p class="hint">Waiting on {{waitingOn}}</p>{{/waitingOn}}
        <ul class="dependencies" id="runs-after">{{#after}}<li><a href="/console/jobs/{{id}}">#{{id}}</a> {{kind}} <span class="state {{state}}">{{state}}</span></li>{{/after}}</ul>{{/hasAfter}}
        {{#hasBefore}}<h2>Runs before</h2>
        <ul class="dependencies" id="runs-before">{{#before}}<li><a href="/console/jobs/{{id}}">#{{id}}</a> {{kind}} <span class="state {{state}}">{{state}}</span></li>{{/before}}</ul>
        {{#moreBefore}}<p class="hint">The first 100 shown.</p>{{/moreBefore}}{{/hasBefore}}
        """

    private static let dead = """
        <div class="scroll"><table>
          <thead><tr><th>Kind</th><th>Error code</th><th>Jobs</th><th>First seen</th><th>Last seen</th><th>Sample payload</th><th></th></tr></thead>
          <tbody>
          {{#groups}}<tr class="group" data-kind="{{kind}}" data-code="{{code}}"><td>{{kind}}</td><td>{{#code}}<code>{{code}}</code>{{/code}}{{^code}}<span class="hint">none</span>{{/code}}</td><td class="count">{{count}}</td><td>{{firstSeen}}</td><td>{{lastSeen}}</td>
            <td><a href="/console/jobs/{{sampleJobId}}">#{{sampleJobId}}</a><pre class="sample">{{samplePayload}}</pre></td>
            <td class="actions">{{#canOperate}}{{#actionable}}
              <form method="post" action="/console/dead/retry"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="kind" value="{{kind}}"><input type="hidden" name="code" value="{{code}}"><button type="submit" class="retry-group">Retry group</button></form>
              <form method="post" action="/console/dead/discard"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="kind" value="{{kind}}"><input type="hidden" name="code" value="{{code}}"><button type="submit" class="danger discard-group">Discard group</button></form>
            {{/actionable}}{{^actionable}}<span class="hint">no error code: retry its jobs one by one</span>{{/actionable}}{{/canOperate}}</td></tr>{{/groups}}
          {{^groups}}<tr><td colspan="7">No dead job.</td></tr>{{/groups}}
          </tbody>
        </table></div>
        """

    private static let confirm = """
        <form method="post" action="{{action}}" class="card">
          <p>{{question}}</p>
          <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="kind" value="{{kind}}"><input type="hidden" name="code" value="{{code}}">
          <input type="hidden" name="confirm" value="{{count}}">
          <button type="submit" id="confirm" class="{{buttonClass}}">{{button}}</button> <a href="/console/dead">Cancel</a>
        </form>
        """

    private static let queues = """
        <div class="scroll"><table>
          <thead><tr><th>Kind</th><th>State</th><th></th></tr></thead>
          <tbody>
          {{#kinds}}<tr data-kind="{{name}}"><td>{{name}}</td><td>{{#paused}}<span class="badge warn">paused</span> by {{pausedBy}} at {{pausedAt}}{{/paused}}{{^paused}}claimed{{/paused}}</td>
            <td>{{#canOperate}}<form method="post" action="/console/queues/{{#paused}}resume{{/paused}}{{^paused}}pause{{/paused}}"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="kind" value="{{name}}"><button type="submit" class="{{#paused}}resume{{/paused}}{{^paused}}pause danger{{/paused}}">{{#paused}}Resume{{/paused}}{{^paused}}Pause{{/paused}}</button></form>{{/canOperate}}</td></tr>{{/kinds}}
          </tbody>
        </table></div>
        <h2>Named queues</h2>
        <div class="scroll"><table>
          <thead><tr><th>Queue</th><th>Paused by</th><th>At</th><th></th></tr></thead>
          <tbody>
          {{#queues}}<tr><td>{{name}}</td><td>{{pausedBy}}</td><td>{{pausedAt}}</td><td>{{#canOperate}}<form method="post" action="/console/queues/resume"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="queue" value="{{name}}"><button type="submit">Resume</button></form>{{/canOperate}}</td></tr>{{/queues}}
          {{^queues}}<tr><td colspan="4">No named queue is paused.</td></tr>{{/queues}}
          </tbody>
        </table></div>
        {{#canOperate}}
        <form method="post" action="/console/queues/pause" class="card inline">
          <input type="hidden" name="csrf" value="{{csrf}}">
          <label>Queue <input name="queue" required></label> <button type="submit" class="danger">Pause queue</button>
        </form>
        {{/canOperate}}
        """

    private static let workers = """
        <div class="scroll"><table>
          <thead><tr><th>Worker</th><th>Host</th><th>Pid</th><th>Kinds</th><th>Running</th><th>Last heartbeat</th><th></th></tr></thead>
          <tbody>
          {{#workers}}<tr{{#silent}} class="silent"{{/silent}}><td>{{id}}</td><td>{{host}}</td><td>{{pid}}</td><td>{{kinds}}</td><td>{{running}}</td><td>{{heartbeat}}</td><td>{{#silent}}<span class="badge bad">silent</span>{{/silent}}{{^silent}}<span class="badge ok">live</span>{{/silent}}</td></tr>{{/workers}}
          {{^workers}}<tr><td colspan="7">No worker has been seen in the last day.</td></tr>{{/workers}}
          </tbody>
        </table></div>
        """

    private static let schedule = """
        <div class="scroll"><table>
          <thead><tr><th>Entry</th><th>Expression</th><th>Last slot</th><th>Its job</th><th>Next slot</th></tr></thead>
          <tbody>
          {{#entries}}<tr><td>{{name}}</td><td><code>{{expression}}</code></td><td>{{lastSlot}}{{#lastBy}} <span class="hint">by {{lastBy}}</span>{{/lastBy}}{{#lastError}} <span class="badge bad">{{lastError}}</span>{{/lastError}}</td><td>{{#lastJob}}<a href="/console/jobs/{{lastJob}}">#{{lastJob}}</a>{{/lastJob}}</td><td>{{nextSlot}}</td></tr>{{/entries}}
          </tbody>
        </table></div>
        """

    private static let renders = """
        <dl class="facts card"><dt>Provider</dt><dd id="render-provider">{{provider}}</dd><dt>Enabled categories</dt><dd>{{categories}}</dd></dl>
        <p class="hint">Read only: <code>fleet_settings</code> (docs/renders.md).</p>
        <form method="get" action="/console/renders" class="filters card">
          <label>Status <select name="status"><option value="">any</option>{{#statuses}}<option value="{{name}}"{{#selected}} selected{{/selected}}>{{name}}</option>{{/statuses}}</select></label>
          <label>Provider <input name="provider" value="{{providerFilter}}"></label>
          <label>User <input name="user" value="{{userFilter}}"></label>
          <button type="submit">Filter</button>
        </form>
        <div class="scroll"><table>
          <thead><tr><th>Render</th><th>User</th><th>Provider</th><th>Status</th><th>Category</th><th>Job</th><th>Ledger</th><th>Provider submission</th><th>Created</th></tr></thead>
          <tbody>
          {{#renders}}<tr><td>{{id}}</td><td>{{userId}}</td><td>{{provider}}</td><td><span class="state {{status}}">{{status}}</span>{{#errorCode}} <code>{{errorCode}}</code>{{/errorCode}}{{#failureCode}} <code class="failure-code">{{failureCode}}</code>{{/failureCode}}{{#errorMessage}}<div class="failure-reason hint">{{errorMessage}}</div>{{/errorMessage}}</td><td>{{category}}</td><td>{{#jobId}}<a href="/console/jobs/{{jobId}}">#{{jobId}}</a>{{/jobId}}</td>
            <td><ul class="ledger">{{#ledger}}<li>{{entry}} {{amount}} <span class="hint">{{at}}</span></li>{{/ledger}}</ul>{{^charged}}<span class="hint">not charged</span>{{/charged}}</td>
            <td>{{#submission}}<pre class="sample">{{submission}}</pre>{{/submission}}</td><td>{{createdAt}}</td></tr>{{/renders}}
          {{^renders}}<tr><td colspan="9">No render matches.</td></tr>{{/renders}}
          </tbody>
        </table></div>
        """

    private static let audit = """
        <div class="scroll"><table>
          <thead><tr><th>At</th><th>Actor</th><th>Action</th><th>Target</th><th>Affected</th></tr></thead>
          <tbody>
          {{#entries}}<tr><td>{{at}}</td><td class="actor">{{actor}}</td><td>{{action}}</td><td><code>{{target}}</code></td><td>{{affected}}</td></tr>{{/entries}}
          {{^entries}}<tr><td colspan="5">No action yet.</td></tr>{{/entries}}
          </tbody>
        </table></div>
        {{#next}}<p><a class="button" href="{{next}}">Older →</a></p>{{/next}}
        """
}
