import Foundation
import TestSupport
import Testing
@testable import TokenKit

/// Files are read whole, with a bound: what a key, secret or settings file may be, and a reason for
/// everything that is not one.
@Suite struct BoundedFileTests {
    @Test func readsAFileAndSaysWhyItCannot() throws {
        let dir = try temporaryDirectory()
        let path = dir.appendingPathComponent("key.pem").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data("hello".utf8)))
        #expect(try BoundedFile.read(path) == Array("hello".utf8))
        #expect(try BoundedFile.readIfPresent(dir.appendingPathComponent("nope").path) == nil)

        let missing = #expect(throws: BoundedFile.Failure.self) { _ = try BoundedFile.read(dir.appendingPathComponent("nope").path) }
        #expect(missing?.kind == .missing && missing?.description == "cannot read \(dir.path)/nope: no such file")
        let directory = #expect(throws: BoundedFile.Failure.self) { _ = try BoundedFile.readIfPresent(dir.path) }
        #expect(directory?.kind == .unreadable && directory?.reason == "it is a directory", "a directory is not \"absent\"")
        let notDirectory = #expect(throws: BoundedFile.Failure.self) { _ = try BoundedFile.read(path + "/inside") }
        #expect(notDirectory?.reason == "a component of the path is not a directory")
    }

    @Test func refusesWhatIsLargerThanItsLimit() throws {
        let dir = try temporaryDirectory()
        // A sparse 17 MiB file: refused from its size, before a byte is read.
        let large = dir.appendingPathComponent("large").path
        #expect(FileManager.default.createFile(atPath: large, contents: Data()))
        #expect(truncate(large, 17 << 20) == 0)
        let refused = #expect(throws: BoundedFile.Failure.self) { _ = try BoundedFile.read(large) }
        #expect(refused?.kind == .tooLarge && refused?.description == "\(large) holds more than 16 MiB, more than is read")
        // Exactly the limit is read; one byte past it is not.
        let edge = dir.appendingPathComponent("edge").path
        #expect(FileManager.default.createFile(atPath: edge, contents: Data(repeating: 7, count: 100)))
        #expect(try BoundedFile.read(edge, limit: 100).count == 100)
        let past = #expect(throws: BoundedFile.Failure.self) { _ = try BoundedFile.read(edge, limit: 99) }
        #expect(past?.description == "\(edge) holds more than 99 bytes, more than is read")
        // A file with no size to look at (a character device) is cut off while it is read.
        let zero = #expect(throws: BoundedFile.Failure.self) { _ = try BoundedFile.read("/dev/zero", limit: 1 << 20) }
        #expect(zero?.kind == .tooLarge && zero?.description == "/dev/zero holds more than 1 MiB, more than is read")
    }
}
