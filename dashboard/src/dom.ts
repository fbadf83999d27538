// The only way this page makes elements: text goes through text nodes, never through HTML
// parsing, so a peer id like "<img src=x onerror=...>" is shown as those characters.

type Child = Node | string | number | null | undefined;
const SAFE_ATTRIBUTES = /^(class|title|id|colspan|type|placeholder|aria-[a-z]+|data-[a-z-]+|role|disabled|value)$/;

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (!SAFE_ATTRIBUTES.test(name)) throw new Error(`attribute not allowed: ${name}`);
    node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function replaceChildren(parent: Element, ...children: Node[]): void {
  parent.replaceChildren(...children);
}

export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const node = document.getElementById(id);
  if (node === null) throw new Error(`#${id} is missing from index.html`);
  return node as T;
}
