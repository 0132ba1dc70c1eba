import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A socket listening on 127.0.0.1 at a port the OS picked: a port some other program holds.
public final class LoopbackListener {
    public let fd: Int32
    public let port: UInt16

    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LoopbackSocket.Failure(call: "socket", errno: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else {
            let code = errno
            close(fd)
            throw LoopbackSocket.Failure(call: "bind", errno: code)
        }
        self.fd = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(fd) }
}

/// A plain TCP connection to 127.0.0.1, for requests sent in pieces.
public final class LoopbackSocket: @unchecked Sendable {
    public let fd: Int32

    /// A socket call that failed, and its errno.
    public struct Failure: Error { public let call: String; public let errno: Int32 }

    public init(port: UInt16) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(call: "socket", errno: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard status == 0 else {
            let code = errno
            close(fd)
            throw Failure(call: "connect", errno: code)
        }
    }

    private let closed = Mutex(false)

    deinit { closeNow() }

    /// Closes the connection now (once; the deinit closes it otherwise).
    public func closeNow() {
        closed.withLock { closed in
            guard !closed else { return }
            closed = true
            close(fd)
        }
    }

    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { throw Failure(call: "send", errno: errno) }
            offset += sent
        }
    }

    /// Makes the close (at deinit) a reset: the server's next read fails and it drops the
    /// connection at once, as when a client goes away (a plain close reads as a half-closure,
    /// after which the server still answers).
    public func resetOnClose() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }

    /// Shuts down the sending side (the server reads end of stream; it can still answer).
    public func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    /// Everything until the server closes the connection (or `seconds` pass without a byte).
    /// Reads until one whole HTTP response has arrived (its head and as many body bytes as its
    /// `Content-Length` says), the connection closes, or `seconds` pass: a keep-alive answer on a
    /// busy machine, without waiting for a silence after it.
    public func receiveResponse(seconds: Int = 60) -> [UInt8] {
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let deadline = Date().addingTimeInterval(TimeInterval(seconds))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while Date() < deadline {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { break }
            if count > 0 { received += buffer[..<count] }
            let text = String(decoding: received, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let length = text[..<end.lowerBound].firstMatch(of: /(?i)content-length: *(\d+)/).flatMap { Int($0.1) } ?? 0
                if text.utf8.distance(from: end.upperBound, to: text.endIndex) >= length { break }
            }
        }
        return received
    }

    public func receiveAll(seconds: Int = 10) -> [UInt8] { receiveToClose(seconds: seconds).bytes }

    /// Everything until the server closes the connection, and whether it did (false when `seconds`
    /// pass without a byte, or the read fails).
    public func receiveToClose(seconds: Int) -> (bytes: [UInt8], closed: Bool) {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { return (received, true) }
            if count < 0 { return (received, false) }
            received += buffer[..<count]
        }
    }
}


extension LoopbackSocket {
    /// Connects to 127.0.0.1:`port`, sends `bytes` in one piece, and returns everything the server
    /// sends until it closes the connection (or `seconds` pass without a byte), on a Dispatch
    /// thread: the blocking calls never hold one of the cooperative pool's threads, which the
    /// server answering them may need.
    /// With `halfClose`, the sending side is shut down after the bytes. The wait is long by
    /// default (a server starting beside many others on a busy machine can be silent for more than
    /// ten seconds); an exchange whose server closes the connection returns at the close.
    public static func exchange(port: UInt16, sending bytes: [UInt8], halfClose: Bool = false, seconds: Int = 60) async throws -> [UInt8] {
        try await exchangeToClose(port: port, sending: bytes, halfClose: halfClose, seconds: seconds).bytes
    }

    /// As ``exchange(port:sending:halfClose:seconds:)``, and whether the server closed the
    /// connection (false when `seconds` passed without a byte or the close).
    public static func exchangeToClose(port: UInt16, sending bytes: [UInt8], halfClose: Bool = false, seconds: Int = 60) async throws -> (bytes: [UInt8], closed: Bool) {
        try await offThePool {
            let socket = try LoopbackSocket(port: port)
            try socket.send(bytes)
            if halfClose { socket.shutdownWrite() }
            return socket.receiveToClose(seconds: seconds)
        }
    }
}
