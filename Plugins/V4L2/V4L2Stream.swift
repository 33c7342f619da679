#if V4L2
import CV4L2
import FieldHAL
import FieldHALSystem
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// One frame as the driver filled it, valid only inside the closure it is passed to (the
/// buffer goes back to the driver afterwards).
struct V4L2Frame {
    var bytes: UnsafeRawBufferPointer
    /// The driver's frame counter: a gap means frames were dropped.
    var sequence: UInt32
}

/// A memory-mapped capture stream: format set, buffers mapped and queued, streaming on.
/// `stop` (or deinit) turns streaming off and returns the buffers, so the device is free
/// for the next user. Lives on one device thread.
final class V4L2Stream {
    let handle: V4L2Handle
    let pixelFormat: FourCC
    let width: Int
    let height: Int
    let bytesPerLine: Int
    private var buffers: [UnsafeMutableRawBufferPointer] = []
    private var streaming = false

    /// The buffers a stream maps unless told: 8, enough for the bursts of other work on a
    /// slow machine to pass without a frame dropped (see `V4L2Camera.Settings`), fewer
    /// where 8 frames would take more than 16 MiB of mapped memory (4 at 1920x1080 YUYV),
    /// never fewer than 4.
    static func defaultBufferCount(frameBytes: Int) -> Int {
        guard frameBytes > 0 else { return 8 }
        return min(8, max(4, (16 << 20) / frameBytes))
    }

    /// Sets the format (the driver, or libv4l2's converter, picks the nearest size it
    /// has), asks for `framesPerSecond` when given, maps `bufferCount` buffers (nil: the
    /// default for the frame's size) and starts.
    init(handle: V4L2Handle, pixelFormat: FourCC, width: Int, height: Int,
         framesPerSecond: Int?, bufferCount: Int?) throws {
        self.handle = handle
        var format = v4l2_format()
        format.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        format.fmt.pix.width = UInt32(width)
        format.fmt.pix.height = UInt32(height)
        format.fmt.pix.pixelformat = pixelFormat.code
        format.fmt.pix.field = V4L2_FIELD_NONE.rawValue
        try handle.control(FIELDHAL_VIDIOC_S_FMT, &format, doing: "set format \(pixelFormat) \(width)x\(height)")
        guard format.fmt.pix.pixelformat == pixelFormat.code else {
            throw FieldHALError(.unsupported, subject: handle.subject,
                                detail: "the device cannot deliver \(pixelFormat) (it offered \(FourCC(format.fmt.pix.pixelformat)))",
                                advice: "`fieldhal camera formats` lists what it offers")
        }
        self.pixelFormat = pixelFormat
        self.width = Int(format.fmt.pix.width)
        self.height = Int(format.fmt.pix.height)
        bytesPerLine = Int(format.fmt.pix.bytesperline)

        if let framesPerSecond {
            // Best effort: many drivers accept only their discrete rates and round.
            var parameters = v4l2_streamparm()
            parameters.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            parameters.parm.capture.timeperframe = v4l2_fract(numerator: 1, denominator: UInt32(framesPerSecond))
            _ = handle.tryControl(FIELDHAL_VIDIOC_S_PARM, &parameters)
        }

        var request = v4l2_requestbuffers()
        request.count = UInt32(bufferCount ?? Self.defaultBufferCount(frameBytes: Int(format.fmt.pix.sizeimage)))
        request.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        request.memory = V4L2_MEMORY_MMAP.rawValue
        try handle.control(FIELDHAL_VIDIOC_REQBUFS, &request, doing: "request buffers")
        guard request.count >= 2 else {
            throw FieldHALError(.io, subject: handle.subject, detail: "the driver granted \(request.count) buffers; streaming needs 2")
        }
        do {
            for index in 0..<request.count {
                var buffer = Self.buffer(index: index)
                try handle.control(FIELDHAL_VIDIOC_QUERYBUF, &buffer, doing: "query buffer")
                let mapped = v4l2_mmap(nil, Int(buffer.length), PROT_READ | PROT_WRITE, MAP_SHARED,
                                       handle.descriptor, Int64(buffer.m.offset))
                guard let mapped, mapped != MAP_FAILED else {
                    throw V4L2Handle.error(errno, subject: handle.subject, doing: "map buffer")
                }
                buffers.append(UnsafeMutableRawBufferPointer(start: mapped, count: Int(buffer.length)))
                try handle.control(FIELDHAL_VIDIOC_QBUF, &buffer, doing: "queue buffer")
            }
            var type = Int32(V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue)
            try handle.control(FIELDHAL_VIDIOC_STREAMON, &type, doing: "start streaming")
            streaming = true
        } catch {
            release()
            throw error
        }
    }

    deinit { release() }

    /// Waits for the next frame — at most `timeout`, and no longer than `wakeup` allows —
    /// hands it to `body`, then gives the buffer back to the driver.
    func nextFrame<T>(timeout: Duration, wakeup: WakeupEvent, _ body: (V4L2Frame) throws -> T) throws -> T {
        let deadline = ContinuousClock.now + timeout
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else {
                // Open, streaming, and silent: the device is there but sends nothing.
                throw FieldHALError(.timeout, subject: handle.subject, detail: "no frame within \(timeout.secondsDescription)",
                                    advice: "the camera is open but sends no frames — check its cable and power (a USB camera on an unpowered hub stalls), or raise frame_timeout_ms for long exposures")
            }
            var entries = [pollfd(fd: handle.descriptor, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0)]
            let ready: Int
            switch SystemCall.poll(&entries, timeout: remaining) {
            case .success(let count): ready = count
            case .failure(let code): throw V4L2Handle.error(code.rawValue, subject: handle.subject, doing: "wait for a frame")
            }
            if entries[1].revents != 0 { throw FieldHALError.cancelled(handle.subject) }
            if ready == 0 { continue }
            var buffer = Self.buffer(index: 0)
            let code = handle.tryControl(FIELDHAL_VIDIOC_DQBUF, &buffer)
            if code == EAGAIN {
                // POLLERR with nothing to dequeue: the device is gone (unbound, unplugged).
                if entries[0].revents & Int16(POLLERR | POLLHUP) != 0 {
                    throw V4L2Handle.error(ENODEV, subject: handle.subject, doing: "dequeue")
                }
                continue
            }
            guard code == 0 else { throw V4L2Handle.error(code, subject: handle.subject, doing: "dequeue") }
            defer { _ = handle.tryControl(FIELDHAL_VIDIOC_QBUF, &buffer) }
            let index = Int(buffer.index)
            guard index < buffers.count, Int(buffer.bytesused) <= buffers[index].count else {
                throw FieldHALError(.protocolError, subject: handle.subject, detail: "the driver returned buffer \(index) with \(buffer.bytesused) bytes")
            }
            if buffer.flags & UInt32(V4L2_BUF_FLAG_ERROR) != 0 { continue }  // a corrupt frame: wait for the next
            let bytes = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buffers[index])[0..<Int(buffer.bytesused)])
            return try body(V4L2Frame(bytes: bytes, sequence: buffer.sequence))
        }
    }

    /// Stops streaming and returns the buffers. Safe to call twice.
    func release() {
        if streaming {
            var type = Int32(V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue)
            _ = handle.tryControl(FIELDHAL_VIDIOC_STREAMOFF, &type)
            streaming = false
        }
        for buffer in buffers { _ = v4l2_munmap(buffer.baseAddress, buffer.count) }
        if !buffers.isEmpty {
            buffers.removeAll()
            var request = v4l2_requestbuffers()
            request.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            request.memory = V4L2_MEMORY_MMAP.rawValue
            _ = handle.tryControl(FIELDHAL_VIDIOC_REQBUFS, &request)
        }
    }

    private static func buffer(index: UInt32) -> v4l2_buffer {
        var buffer = v4l2_buffer()
        buffer.index = index
        buffer.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        buffer.memory = V4L2_MEMORY_MMAP.rawValue
        return buffer
    }
}

#endif
