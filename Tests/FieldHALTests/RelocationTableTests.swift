import FieldHALSystem
import Foundation
import Testing

/// `RelocationTable` on this test process's own executable: the loader's table is found in a
/// segment that is never written, its pages leave the process's mappings, and what they held
/// reads the same afterwards (mapped again from the file).
@Suite struct RelocationTableTests {
    /// Pages of `[address, address + size)` present in this process, by /proc/self/pagemap
    /// (bit 63 of each page's entry; readable by the process itself).
    static func presentPages(_ address: UInt, _ size: Int) throws -> Int {
        let page = UInt(sysconf(Int32(_SC_PAGESIZE)))
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/pagemap"))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(address / page * 8))
        let entries = try #require(try handle.read(upToCount: Int(UInt(size) / page) * 8))
        return stride(from: 0, to: entries.count, by: 8).filter { entries[$0 + 7] & 0x80 != 0 }.count
    }

    @Test func theLoadersTableIsGivenBackAndReadsTheSame() throws {
        let (address, size) = try #require(RelocationTable.mappedPages(), "this test's executable has a relocation table")
        let page = UInt(sysconf(Int32(_SC_PAGESIZE)))
        #expect(address % page == 0 && size > 0 && UInt(size) % page == 0)
        let table = try #require(UnsafeRawPointer(bitPattern: address))
        let before = Array(UnsafeRawBufferPointer(start: table, count: size))  // every page present now
        #expect(try Self.presentPages(address, size) == Int(UInt(size) / page))

        #expect(RelocationTable.release() == size)
        #expect(try Self.presentPages(address, size) == 0, "the table's pages left the process")
        #expect(Array(UnsafeRawBufferPointer(start: table, count: size)) == before, "read again, from the file")
    }
}
