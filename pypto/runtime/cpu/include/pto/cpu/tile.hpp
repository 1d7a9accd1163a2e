// pypto's CPU PTO: Tile, GlobalTensor (with Shape / Stride) and TASSIGN.
//
// A Tile is a view of `Rows x Cols` elements in one local memory of the current core, placed by
// TASSIGN at a byte address. The valid region (static or DYNAMIC) is a prefix of rows and cols.
// Element (r, c) lies at r * RowStride + c * ColStride. A plain (SLayout::NoneBox) ColMajor vector
// tile stores its columns one after another (c * Rows + r), as pto-isa does: generated code may
// alias it with a RowMajor tile of its transpose (what pto-isa's RowMajor-only instructions need).
// Every other tile is row-major here whatever its layout arguments say: they select fractal
// layouts on the device, which pypto's CPU header does not model (nothing aliases those tiles).
#pragma once

#include <string>

#include "core.hpp"

namespace pto {

template <TileType Loc_, typename Element_, int Rows_, int Cols_, BLayout BFractal_ = BLayout::RowMajor,
          int RowValid_ = Rows_, int ColValid_ = Cols_, SLayout SFractal_ = SLayout::NoneBox,
          int SFractalSize_ = TileConfig::fractalABSize, PadValue PadVal_ = PadValue::Null>
struct Tile {
    using DType = Element_;
    static constexpr TileType Loc = Loc_;
    static constexpr int Rows = Rows_;
    static constexpr int Cols = Cols_;
    static constexpr int ValidRow = RowValid_;
    static constexpr int ValidCol = ColValid_;
    static constexpr BLayout BFractal = BFractal_;
    static constexpr SLayout SFractal = SFractal_;
    static constexpr int SFractalSize = SFractalSize_;
    static constexpr PadValue PadVal = PadVal_;
    static constexpr bool isRowMajor = BFractal_ == BLayout::RowMajor;
    static constexpr int Numel = Rows * Cols;
    static constexpr bool StoresColumns =
        Loc_ == TileType::Vec && BFractal_ == BLayout::ColMajor && SFractal_ == SLayout::NoneBox;
    static constexpr size_t RowStride = StoresColumns ? 1 : Cols_;
    static constexpr size_t ColStride = StoresColumns ? Rows_ : 1;
    static_assert(Rows > 0 && Cols > 0, "a tile has at least one row and one column");
    static_assert((ValidRow == DYNAMIC || (ValidRow >= 0 && ValidRow <= Rows)) &&
                      (ValidCol == DYNAMIC || (ValidCol >= 0 && ValidCol <= Cols)),
                  "a static valid shape lies within the tile");

    Tile() = default;

    template <int R = ValidRow, int C = ValidCol, std::enable_if_t<R == DYNAMIC && C == DYNAMIC, int> = 0>
    Tile(unsigned valid_rows, unsigned valid_cols)
    {
        SetValidShape(valid_rows, valid_cols);
    }

    template <int R = ValidRow, int C = ValidCol, std::enable_if_t<(R == DYNAMIC) != (C == DYNAMIC), int> = 0>
    explicit Tile(unsigned valid)
    {
        if constexpr (R == DYNAMIC) {
            SetValidRow(valid);
        } else {
            SetValidCol(valid);
        }
    }

    unsigned GetValidRow() const { return ValidRow == DYNAMIC ? valid_rows_ : static_cast<unsigned>(ValidRow); }
    unsigned GetValidCol() const { return ValidCol == DYNAMIC ? valid_cols_ : static_cast<unsigned>(ValidCol); }

    void SetValidRow(unsigned rows)
    {
        static_assert(ValidRow == DYNAMIC, "only a DYNAMIC valid row count can be set");
        if (rows > static_cast<unsigned>(Rows)) {
            pypto::fail("valid rows " + std::to_string(static_cast<int>(rows)) + " exceed the tile's " +
                        std::to_string(Rows) + " rows");
        }
        valid_rows_ = rows;
    }

    void SetValidCol(unsigned cols)
    {
        static_assert(ValidCol == DYNAMIC, "only a DYNAMIC valid column count can be set");
        if (cols > static_cast<unsigned>(Cols)) {
            pypto::fail("valid cols " + std::to_string(static_cast<int>(cols)) + " exceed the tile's " +
                        std::to_string(Cols) + " cols");
        }
        valid_cols_ = cols;
    }

    void SetValidShape(unsigned rows, unsigned cols)
    {
        SetValidRow(rows);
        SetValidCol(cols);
    }

    DType* data() const
    {
        if (data_ == nullptr) {
            pypto::fail("a tile is used before TASSIGN placed it in local memory");
        }
        return data_;
    }

    DType GetValue(uint32_t offset) const { return data()[offset]; }
    void SetValue(uint32_t offset, DType v) { data()[offset] = v; }

    DType* data_ = nullptr;

private:
    unsigned valid_rows_ = static_cast<unsigned>(Rows);
    unsigned valid_cols_ = static_cast<unsigned>(Cols);
};

template <typename T, int Rows, int Cols, int RowValid = Rows, int ColValid = Cols>
using TileLeft = Tile<TileType::Left, T, Rows, Cols, BLayout::ColMajor, RowValid, ColValid, SLayout::RowMajor,
                      TileConfig::fractalABSize>;
template <typename T, int Rows, int Cols, int RowValid = Rows, int ColValid = Cols>
using TileRight = Tile<TileType::Right, T, Rows, Cols, BLayout::RowMajor, RowValid, ColValid, SLayout::ColMajor,
                       TileConfig::fractalABSize>;
template <typename T, int Rows, int Cols, int RowValid = Rows, int ColValid = Cols>
using TileAcc = Tile<TileType::Acc, T, Rows, Cols, BLayout::ColMajor, RowValid, ColValid, SLayout::RowMajor,
                     TileConfig::fractalCSize>;

template <class T>
struct is_tile : std::false_type {};
template <TileType L, typename E, int R, int C, BLayout B, int VR, int VC, SLayout S, int F, PadValue P>
struct is_tile<Tile<L, E, R, C, B, VR, VC, S, F, P>> : std::true_type {};
template <class T>
inline constexpr bool is_tile_v = is_tile<std::remove_cv_t<T>>::value;

namespace cpu {
// Offset of element (r, c) in a tile's storage; rows_contiguous: (r, c) and (r, c + 1) are adjacent.
template <class T>
constexpr size_t offset(size_t r, size_t c)
{
    return r * T::RowStride + c * T::ColStride;
}
template <class... T>
inline constexpr bool rows_contiguous = ((T::ColStride == 1) && ...);
}  // namespace cpu

// ---------------------------------------------------------------- global tensors
template <int64_t N1 = DYNAMIC, int64_t N2 = DYNAMIC, int64_t N3 = DYNAMIC, int64_t N4 = DYNAMIC,
          int64_t N5 = DYNAMIC>
struct Shape {
    static constexpr int64_t staticShape[5] = {N1, N2, N3, N4, N5};
    int64_t shape[5];

    Shape() : Shape(1, 1, 1, 1, 1) {}
    Shape(int64_t n1, int64_t n2, int64_t n3, int64_t n4, int64_t n5)
    {
        const int64_t given[5] = {n1, n2, n3, n4, n5};
        for (int i = 0; i < 5; ++i) shape[i] = staticShape[i] == DYNAMIC ? given[i] : staticShape[i];
    }
};

template <int64_t S1 = DYNAMIC, int64_t S2 = DYNAMIC, int64_t S3 = DYNAMIC, int64_t S4 = DYNAMIC,
          int64_t S5 = DYNAMIC>
struct Stride {
    static constexpr int64_t staticStride[5] = {S1, S2, S3, S4, S5};
    int64_t stride[5];

    Stride() : Stride(1, 1, 1, 1, 1) {}
    Stride(int64_t s1, int64_t s2, int64_t s3, int64_t s4, int64_t s5)
    {
        const int64_t given[5] = {s1, s2, s3, s4, s5};
        for (int i = 0; i < 5; ++i) stride[i] = staticStride[i] == DYNAMIC ? given[i] : staticStride[i];
    }
};

// A GM tensor view: pointer plus 5-D shape and strides (in elements). TLOAD / TSTORE move the
// box shape[3] x shape[4] (leading dims 1) between it and a tile's valid region.
template <typename Element_, typename Shape_, typename Stride_, Layout Layout_ = Layout::ND>
struct GlobalTensor {
    using Shape = Shape_;
    using Stride = Stride_;
    using RawDType = std::remove_cv_t<Element_>;
    using DType = RawDType;
    static constexpr Layout layout = Layout_;

    GlobalTensor() = default;
    GlobalTensor(DType* data, const Shape& shape = Shape(), const Stride& stride = Stride())
        : data_(data), shape_(shape), stride_(stride)
    {
    }

    DType* data() const { return data_; }
    int64_t GetShape(int dim) const { return shape_.shape[dim]; }
    int64_t GetStride(int dim) const { return stride_.stride[dim]; }

    DType* data_ = nullptr;
    Shape shape_;
    Stride stride_;
};

namespace cpu {

template <class T>
constexpr int space_of()
{
    switch (T::Loc) {
        case TileType::Vec:
            return kUB;
        case TileType::Mat:
        case TileType::Bias:
        case TileType::Scaling:
            return kL1;
        case TileType::Left:
            return kL0A;
        case TileType::Right:
            return kL0B;
        case TileType::Acc:
            return kL0C;
    }
    return kUB;
}

}  // namespace cpu

namespace cpu {

// TASSIGN's failures, out of line and not templates: the message is built once per translation
// unit instead of in every tile type's TASSIGN (most of its code and of its compile time).
[[noreturn]] __attribute__((noinline, cold)) inline void tassign_too_big(int rows, int cols, int space,
                                                                          uint64_t offset, uint64_t bytes,
                                                                          uint64_t capacity)
{
    pypto::fail(std::string("TASSIGN: a ") + std::to_string(rows) + "x" + std::to_string(cols) + " tile at " +
                space_name(space) + "+" + std::to_string(offset) + " needs " + std::to_string(offset + bytes) +
                " bytes; " + space_name(space) + " has " + std::to_string(capacity));
}

[[noreturn]] __attribute__((noinline, cold)) inline void tassign_misaligned(int space, uint64_t offset,
                                                                             uint64_t alignment)
{
    pypto::fail(std::string("TASSIGN: address ") + std::to_string(offset) + " in " + space_name(space) +
                " is not aligned to " + std::to_string(alignment) + " bytes");
}

}  // namespace cpu

// Place a tile at a byte address of its local memory (checked against capacity and alignment).
template <typename T, typename AddrType, std::enable_if_t<is_tile_v<T>, int> = 0>
inline void TASSIGN(T& tile, AddrType addr)
{
    constexpr int space = cpu::space_of<T>();
    cpu::CoreState& core = cpu::current_core();
    const uint64_t offset = static_cast<uint64_t>(addr);
    const uint64_t bytes = static_cast<uint64_t>(T::Numel) * sizeof(typename T::DType);
    if (offset + bytes > core.capacity[space]) {
        cpu::tassign_too_big(T::Rows, T::Cols, space, offset, bytes, core.capacity[space]);
    }
    if (core.alignment > 1 && offset % core.alignment != 0) {
        cpu::tassign_misaligned(space, offset, core.alignment);
    }
    tile.data_ = reinterpret_cast<typename T::DType*>(core.memory[space] + offset);
}

template <typename E, typename S, typename St, Layout L>
inline void TASSIGN(GlobalTensor<E, S, St, L>& tensor, typename GlobalTensor<E, S, St, L>::DType* ptr)
{
    tensor.data_ = ptr;
}

}  // namespace pto
