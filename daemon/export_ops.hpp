// SPDX-License-Identifier: MIT
// SCAN, DUMP and RESTORE: the native ops behind `pt2cache export` and
// `pt2cache import` (docs/protocol.md, "Export and import").
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "daemon/asio.hpp"
#include "daemon/context.hpp"
#include "daemon/io_buffers.hpp"
#include "proto/frame.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon {

// Serves one SCAN, DUMP or RESTORE request, appending the reply to `out`;
// an Error is for the session to answer (and close on, if its status says
// so). `owner`, when set, owns `body` (a large RESTORE keeps it uncopied).
awaitable<tl::expected<void, proto::Error>>
serve_export_op(Context& context, const proto::Header& header, std::span<const std::byte> body,
                const std::shared_ptr<const std::vector<std::byte>>& owner, OutputBatch& out);

} // namespace pt2cache::daemon
