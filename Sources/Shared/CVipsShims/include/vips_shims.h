// Fixed-argument wrappers around libvips' variadic calls and macros: Swift cannot call a C
// variadic function, so each operation gets one wrapper.
#ifndef FLEET_VIPS_SHIMS_H
#define FLEET_VIPS_SHIMS_H

#include <vips/vips.h>

// libvips: VIPS_INIT is a macro, and every operation takes a NULL-terminated option list.
int fleet_vips_init(const char *program);
// Opens the file lazily (header only); fail_on is a VipsFailOn.
VipsImage *fleet_vips_open(const char *path, int fail_on);
// Shrink-on-load thumbnail within `width` x `height` (0: that side unbounded), aspect kept,
// never upscaled, EXIF orientation applied; with an export_profile (NULL: none) its embedded
// profile is converted to that one.
int fleet_vips_thumbnail(const char *path, VipsImage **out, int width, int height, int fail_on, const char *export_profile);
// Removes alpha by compositing on white.
int fleet_vips_flatten_white(VipsImage *in, VipsImage **out);
int fleet_vips_to_srgb(VipsImage *in, VipsImage **out);
// JPEG in memory, metadata stripped, optimised Huffman tables. Free the buffer with g_free.
int fleet_vips_jpeg_buffer(VipsImage *in, void **buffer, size_t *length, int quality);
// The first `count` bands of the pixel at (x, y); missing bands read as 0.
int fleet_vips_pixel(VipsImage *in, int x, int y, double *values, int count);
// Decodes an image held in memory, lazily.
VipsImage *fleet_vips_open_buffer(const void *data, size_t length, int fail_on);
// `count` bands starting at `band`.
int fleet_vips_extract_band(VipsImage *in, VipsImage **out, int band, int count);
// Resized to exactly width x height.
int fleet_vips_resize_exact(VipsImage *in, VipsImage **out, int width, int height);
int fleet_vips_bandjoin2(VipsImage *first, VipsImage *second, VipsImage **out);
int fleet_vips_cast_uchar(VipsImage *in, VipsImage **out);
// Bounding box of the pixels further than `threshold` from 0 (a one-band image, e.g. alpha).
int fleet_vips_bounds(VipsImage *in, double threshold, int *left, int *top, int *width, int *height);
int fleet_vips_crop(VipsImage *in, VipsImage **out, int left, int top, int width, int height);
// PNG in memory, metadata stripped. Free the buffer with g_free.
int fleet_vips_png_buffer(VipsImage *in, void **buffer, size_t *length);
// Mean of every band of every pixel.
int fleet_vips_average(VipsImage *in, double *mean);
// An alpha mask for a garment shot on a plain background: pixels within `threshold` (RGB
// distance) of the border's median colour and connected to the border are clear, the rest
// opaque; the edge is blurred by a Gaussian of sigma `feather` (0: hard edge).
int fleet_vips_plain_background_alpha(VipsImage *in, double threshold, double feather, VipsImage **out);
// `overlay` (with alpha) laid over `base` with its top-left corner at (x, y).
int fleet_vips_composite_over(VipsImage *base, VipsImage *overlay, int x, int y, VipsImage **out);
// Frees a buffer libvips allocated.
void fleet_g_free(void *pointer);
// Drops a reference to an image.
void fleet_vips_unref(VipsImage *image);

#endif
