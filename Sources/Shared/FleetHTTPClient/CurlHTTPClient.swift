import CCurl
import CCurlShims
import FleetSupport
import Foundation
import Synchronization

/// The fleet's HTTP client: libcurl's multi interface driven by one thread, so any number of
/// requests wait at once without a thread each. Connections are kept and reused by the multi
/// handle; TLS peers and host names are always verified.
public final class CurlHTTPClient: HTTPClient, Sendable {
    private let loop: CurlMultiLoop

    /// - Parameter connectTimeout: the limit for establishing a connection, within each request's own timeout.
    public init(connectTimeout: Duration = .seconds(10), maxConnectionsPerHost: Int = 64) {
        _ = CurlHTTPClient.globalInit
        loop = CurlMultiLoop(connectTimeout: connectTimeout, maxConnectionsPerHost: maxConnectionsPerHost)
    }

    deinit { loop.stop() }

    /// The request with the current span's `traceparent` (a provider submit, a download…), so the
    /// peer's own trace can join ours; unchanged when tracing is off or the caller set one.
    static func traced(_ request: HTTPClientRequest) -> HTTPClientRequest {
        guard let traceParent = TracePropagation.traceParent(),
              !request.headers.contains(where: { $0.name.lowercased() == TracePropagation.header }) else { return request }
        var request = request
        request.headers.append((TracePropagation.header, traceParent))
        return request
    }

    /// curl_global_init is not thread-safe: run it once, on first use.
    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    public func execute(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        guard let url = URL(string: request.url), let scheme = url.scheme?.lowercased(),
              scheme == "http" || scheme == "https", url.host != nil
        else { throw HTTPClientError.invalidRequest("not an http(s) URL: \(HTTPClientError.redacted(request.url))") }
        let transfer = try CurlTransfer(request: Self.traced(request))
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                transfer.continuation = continuation
                loop.add(transfer)
            }
        } onCancel: {
            loop.cancel(transfer)
        }
    }
}

/// One request in flight. Touched by the caller until `add`, then only by the loop thread.
final class CurlTransfer: @unchecked Sendable {
    let request: HTTPClientRequest
    let easy: UnsafeMutableRawPointer
    var continuation: CheckedContinuation<HTTPClientResponse, any Error>?
    /// Set by the caller's task cancellation, which may come before the loop has seen the transfer.
    let isCancelled = Mutex(false)
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var connectToList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
    private var body = Data()
    private var headers: [String: String] = [:]
    private var exceededLimit = false
    /// How much of a read-callback body curl has taken.
    private var bodySent = 0

    init(request: HTTPClientRequest) throws {
        guard let easy = curl_easy_init() else { throw HTTPClientError.invalidRequest("curl_easy_init failed") }
        self.easy = easy
        self.request = request
        errorBuffer.initialize(to: 0)
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_slist_free_all(headerList)
        curl_slist_free_all(connectToList)
        errorBuffer.deallocate()
    }

    /// Sets every option; the transfer must stay alive while curl holds `self` as callback context.
    func configure(connectTimeout: Duration) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        fleet_curl_setopt_string(easy, CURLOPT_URL, request.url)
        fleet_curl_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https")
        fleet_curl_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        fleet_curl_setopt_long(easy, CURLOPT_FOLLOWLOCATION, request.followsRedirects ? 1 : 0)
        fleet_curl_setopt_long(easy, CURLOPT_MAXREDIRS, 5)
        if let address = request.pinnedAddress, let url = URLComponents(string: request.url), let host = url.host {
            // CONNECT_TO rather than RESOLVE: RESOLVE entries stay in the multi handle's DNS
            // cache for every later transfer; CONNECT_TO is this transfer's alone.
            let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
            let target = address.contains(":") ? "[\(address)]" : address
            connectToList = curl_slist_append(nil, "\(host):\(port):\(target):\(port)")
            fleet_curl_setopt_pointer(easy, CURLOPT_CONNECT_TO, connectToList)
        }
        fleet_curl_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        fleet_curl_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1)
        fleet_curl_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2)
        fleet_curl_setopt_long(easy, CURLOPT_TIMEOUT_MS, request.timeout.curlMilliseconds)
        fleet_curl_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, min(connectTimeout, request.timeout).curlMilliseconds)
        fleet_curl_setopt_off(easy, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxResponseBytes))
        fleet_curl_setopt_string(easy, CURLOPT_ACCEPT_ENCODING, "")
        fleet_curl_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer)
        fleet_curl_setopt_pointer(easy, CURLOPT_PRIVATE, context)
        fleet_curl_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION, curlWriteBody)
        fleet_curl_setopt_pointer(easy, CURLOPT_WRITEDATA, context)
        fleet_curl_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION, curlWriteHeader)
        fleet_curl_setopt_pointer(easy, CURLOPT_HEADERDATA, context)

        switch request.method {
        case .get: fleet_curl_setopt_long(easy, CURLOPT_HTTPGET, 1)
        // NOBODY sends HEAD and reads no body: the answer's Content-Length describes the object,
        // not bytes to wait for.
        case .head: fleet_curl_setopt_long(easy, CURLOPT_NOBODY, 1)
        case .post, .put, .patch, .delete:
            if request.method != .post { fleet_curl_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method.rawValue) }
            let payload = request.body ?? Data()
            if request.isIdempotent {
                // COPYPOSTFIELDS lets curl own the bytes; the size must be set first.
                fleet_curl_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(payload.count))
                if payload.isEmpty {
                    fleet_curl_setopt_string(easy, CURLOPT_COPYPOSTFIELDS, "")
                } else {
                    _ = payload.withUnsafeBytes { bytes in
                        fleet_curl_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress))
                    }
                }
            } else {
                // libcurl sends a request again, on another connection, when a reused keep-alive
                // connection dies before any byte of the answer (Curl_retry_request, up to 5
                // times): right for a GET, a second paid job for a POST whose body the provider
                // had read. A body from fixed fields it re-sends freely; one from a read callback
                // it must rewind first, and with no seek callback it cannot, so the transfer
                // ends CURLE_SEND_FAIL_REWIND instead. A connection found dead before any byte of
                // the body went out is still replaced: the server cannot have taken that request. The only re-sends are then the caller's policy.
                fleet_curl_setopt_long(easy, CURLOPT_POST, 1)
                fleet_curl_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(payload.count))
                fleet_curl_setopt_data_callback(easy, CURLOPT_READFUNCTION, curlReadBody)
                fleet_curl_setopt_pointer(easy, CURLOPT_READDATA, context)
            }
        }
        // No "Expect: 100-continue" round trip on larger bodies.
        for line in request.headers.map({ "\($0.name): \($0.value)" }) + ["Expect:"] {
            headerList = curl_slist_append(headerList, line)
        }
        fleet_curl_setopt_pointer(easy, CURLOPT_HTTPHEADER, headerList)
    }

    /// The next bytes of a request body sent through the read callback.
    func readBody(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let payload = request.body ?? Data()
        let count = min(buffer.count, payload.count - bodySent)
        guard count > 0 else { return 0 }
        payload.copyBytes(to: buffer.bindMemory(to: UInt8.self), from: payload.startIndex + bodySent..<payload.startIndex + bodySent + count)
        bodySent += count
        return count
    }

    func appendBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard body.count + bytes.count <= request.maxResponseBytes else {
            exceededLimit = true
            return false
        }
        body.append(contentsOf: bytes)
        return true
    }

    func appendHeader(_ line: String) {
        if line.hasPrefix("HTTP/") {
            headers.removeAll()  // a redirect or 100-continue starts a new header block
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
        headers[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The outcome once curl reports the transfer done.
    func outcome(code: CURLcode) -> Result<HTTPClientResponse, any Error> {
        let url = request.url
        if exceededLimit || code == CURLE_FILESIZE_EXCEEDED {
            return .failure(HTTPClientError.responseTooLarge(url: url, limit: request.maxResponseBytes))
        }
        switch code {
        case CURLE_OK:
            var status = 0
            fleet_curl_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            return .success(HTTPClientResponse(status: status, headers: headers, body: body))
        case CURLE_OPERATION_TIMEDOUT:
            return .failure(HTTPClientError.timedOut(url: url, after: request.timeout))
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE:
            return .failure(HTTPClientError.tlsFailure(url: url, reason: reason(code)))
        case CURLE_SEND_FAIL_REWIND:
            // The connection died after the body went out: the server may have it.
            return .failure(HTTPClientError.connectionFailed(url: url, reason: "the connection closed after the request was sent; not sent again"))
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL:
            return .failure(HTTPClientError.invalidRequest(reason(code)))
        default:
            return .failure(HTTPClientError.connectionFailed(url: url, reason: reason(code)))
        }
    }

    private func reason(_ code: CURLcode) -> String {
        let detail = String(cString: errorBuffer)
        return detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
    }
}

private func transfer(_ context: UnsafeMutableRawPointer?) -> CurlTransfer {
    Unmanaged<CurlTransfer>.fromOpaque(context!).takeUnretainedValue()
}

/// CURLOPT_READFUNCTION: the body of a non-idempotent request, in order, once.
private let curlReadBody: fleet_curl_data_callback = { data, size, count, context in
    guard let data else { return 0 }
    return transfer(context).readBody(into: UnsafeMutableRawBufferPointer(start: data, count: size * count))
}

/// CURLOPT_WRITEFUNCTION: returning less than given aborts the transfer (the size cap).
private let curlWriteBody: fleet_curl_data_callback = { data, size, count, context in
    let length = size * count
    let accepted = transfer(context).appendBody(UnsafeRawBufferPointer(start: data, count: length))
    return accepted ? length : 0
}

private let curlWriteHeader: fleet_curl_data_callback = { data, size, count, context in
    let length = size * count
    if let data {
        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
        transfer(context).appendHeader(line)
    }
    return length
}

/// The thread that owns the multi handle: adds transfers, runs them, completes them.
final class CurlMultiLoop: @unchecked Sendable {
    private let multi: UnsafeMutableRawPointer
    private let connectTimeout: Duration
    private let inbox = Mutex(Inbox())
    private var active: [UnsafeMutableRawPointer: CurlTransfer] = [:]  // loop thread only

    private struct Inbox {
        var added: [CurlTransfer] = []
        var cancelled: [CurlTransfer] = []
        var stopping = false
    }

    init(connectTimeout: Duration, maxConnectionsPerHost: Int) {
        multi = curl_multi_init()
        self.connectTimeout = connectTimeout
        fleet_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxConnectionsPerHost)
        let thread = Thread { [self] in run() }
        thread.name = "curl-multi"
        thread.start()
    }

    func add(_ transfer: CurlTransfer) {
        inbox.withLock { $0.added.append(transfer) }
        curl_multi_wakeup(multi)
    }

    func cancel(_ transfer: CurlTransfer) {
        transfer.isCancelled.withLock { $0 = true }
        inbox.withLock { $0.cancelled.append(transfer) }
        curl_multi_wakeup(multi)
    }

    func stop() {
        inbox.withLock { $0.stopping = true }
        curl_multi_wakeup(multi)
    }

    private func run() {
        var stillRunning: Int32 = 0
        while true {
            let (added, cancelled, stopping) = inbox.withLock { inbox in
                defer { inbox.added.removeAll(); inbox.cancelled.removeAll() }
                return (inbox.added, inbox.cancelled, inbox.stopping)
            }
            for transfer in added {
                transfer.configure(connectTimeout: connectTimeout)
                active[transfer.easy] = transfer
                curl_multi_add_handle(multi, transfer.easy)
            }
            for transfer in added + cancelled where transfer.isCancelled.withLock({ $0 }) {
                guard active[transfer.easy] != nil else { continue }
                finish(transfer, with: .failure(HTTPClientError.cancelled(url: transfer.request.url)))
            }
            if stopping {
                for transfer in Array(active.values) {
                    finish(transfer, with: .failure(HTTPClientError.cancelled(url: transfer.request.url)))
                }
                curl_multi_cleanup(multi)
                return
            }
            curl_multi_perform(multi, &stillRunning)
            var queued: Int32 = 0
            while let message = curl_multi_info_read(multi, &queued) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                      let transfer = active[easy]
                else { continue }
                finish(transfer, with: transfer.outcome(code: message.pointee.data.result))
            }
            curl_multi_poll(multi, nil, 0, 1000, nil)
        }
    }

    private func finish(_ transfer: CurlTransfer, with result: Result<HTTPClientResponse, any Error>) {
        curl_multi_remove_handle(multi, transfer.easy)
        active[transfer.easy] = nil
        transfer.continuation?.resume(with: result)
        transfer.continuation = nil
    }
}

extension Duration {
    /// Whole milliseconds rounded up, at least 1 (libcurl reads 0 as "no limit").
    var curlMilliseconds: Int { max(1, Int((seconds * 1000).rounded(.up))) }
}
